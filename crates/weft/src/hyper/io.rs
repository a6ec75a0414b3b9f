//! [`WeftIo`]: a weft stream as hyper's `Read + Write`.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::hyper::rt::ReadBufCursor;
use futures_io::{AsyncRead, AsyncWrite};

/// The least and the most a read zeroes and asks for. hyper offers the spare
/// capacity of its read buffer (8 KiB to start with, more after reads that fill it),
/// uninitialized; weft's streams read into initialized memory, so the part a read
/// may fill is zeroed first. Zeroing all of it cost about 6 % of a hello-world
/// server's CPU time (a read that finds nothing zeroes too), so the size adapts to
/// what reads return: it doubles after a read that fills it and halves after one
/// that fills less than a quarter of it.
const MIN_READ: usize = 1024;
const MAX_READ: usize = 64 * 1024;

/// A weft stream as `hyper::rt::Read + hyper::rt::Write`, for hyper's server and
/// client connections.
///
/// Any `futures_io` stream fits: [`weft::net::TcpStream`](crate::net::TcpStream), its
/// owned halves, and weft's Unix streams. `WeftIo<T>` is `Send` and `Unpin` when `T`
/// is. `poll_shutdown` is the stream's `poll_close` (for a TCP stream: shut the write
/// side).
///
/// ```
/// use std::convert::Infallible;
/// use http_body_util::Full;
/// use hyper::body::Bytes;
/// use weft::hyper::WeftIo;
///
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     let server = weft::spawn(async move {
///         let (stream, _) = listener.accept().await.unwrap();
///         let service = hyper::service::service_fn(|_req| async {
///             Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("ok"))))
///         });
///         hyper::server::conn::http1::Builder::new()
///             .serve_connection(WeftIo::new(stream), service)
///             .await
///             .unwrap();
///     });
///     // A client in plain bytes, closing after one request.
///     use weft::io::{AsyncReadExt, AsyncWriteExt};
///     let mut c = weft::net::TcpStream::connect(addr).await.unwrap();
///     c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
///     let mut response = String::new();
///     c.read_to_string(&mut response).await.unwrap();
///     assert!(response.starts_with("HTTP/1.1 200 OK\r\n"));
///     assert!(response.ends_with("\r\n\r\nok"));
///     server.await.unwrap();
/// });
/// ```
#[derive(Debug)]
pub struct WeftIo<T> {
    inner: T,
    /// How much the next read zeroes and asks for (`MIN_READ..=MAX_READ`).
    next_read: usize,
}

impl<T> WeftIo<T> {
    /// Wraps `inner`.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let l = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let s = weft::net::TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    ///     let io = weft::hyper::WeftIo::new(s);
    ///     assert!(io.inner().peer_addr().is_ok());
    /// });
    /// ```
    pub fn new(inner: T) -> WeftIo<T> {
        WeftIo {
            inner,
            next_read: MIN_READ,
        }
    }

    /// The wrapped stream.
    ///
    /// ```
    /// let io = weft::hyper::WeftIo::new(vec![1u8, 2, 3]);
    /// assert_eq!(io.inner().len(), 3);
    /// ```
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The wrapped stream, mutably.
    ///
    /// ```
    /// let mut io = weft::hyper::WeftIo::new(Vec::<u8>::new());
    /// io.inner_mut().push(7);
    /// assert_eq!(io.inner(), &[7]);
    /// ```
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps the stream.
    ///
    /// ```
    /// let io = weft::hyper::WeftIo::new(vec![1u8, 2]);
    /// assert_eq!(io.into_inner(), [1, 2]);
    /// ```
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: AsyncRead + Unpin> ::hyper::rt::Read for WeftIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let n = {
            // SAFETY: `as_mut` requires that no byte of the unfilled part that may be
            // initialized is de-initialized; this slice is only ever written with
            // initialized bytes (zeros below, then what the reader reads).
            let unfilled = unsafe { buf.as_mut() };
            let len = unfilled.len().min(self.next_read);
            let dst = &mut unfilled[..len];
            dst.fill(MaybeUninit::new(0));
            // SAFETY: every byte of `dst` was initialized just above, and
            // `MaybeUninit<u8>` has the layout of `u8`.
            let dst = unsafe { &mut *(dst as *mut [MaybeUninit<u8>] as *mut [u8]) };
            match Pin::new(&mut self.inner).poll_read(cx, dst) {
                Poll::Ready(Ok(n)) => {
                    assert!(
                        n <= len,
                        "AsyncRead::poll_read reported more bytes than asked"
                    );
                    if n == len && len == self.next_read {
                        self.next_read = (self.next_read * 2).min(MAX_READ);
                    } else if n < len / 4 {
                        self.next_read = (self.next_read / 2).max(MIN_READ);
                    }
                    n
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        };
        // SAFETY: the first `n` bytes of the unfilled part were initialized above
        // (`n <= len`, the zeroed length, checked).
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> ::hyper::rt::Write for WeftIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }

    // `is_write_vectored` stays false (`futures_io` cannot tell): hyper then gathers a
    // response's head and body into one buffer and writes it with one call.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::hyper::rt::{Read, ReadBuf, Write};
    use std::task::Waker;

    /// A reader that hands out its bytes a few at a time.
    struct Trickle(Vec<u8>, usize);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            // Everything handed over must be initialized (Miri would see otherwise).
            assert!(buf.iter().all(|&b| b == 0));
            let n = buf.len().min(self.1).min(self.0.len());
            let rest = self.0.split_off(n);
            buf[..n].copy_from_slice(&self.0);
            self.0 = rest;
            Poll::Ready(Ok(n))
        }
    }

    #[test]
    fn reads_into_uninitialized_memory_in_pieces() {
        let mut io = WeftIo::new(Trickle(b"hello, world".to_vec(), 5));
        let mut storage = [MaybeUninit::<u8>::uninit(); 64];
        let mut rb = ReadBuf::uninit(&mut storage);
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..4 {
            let r = Pin::new(&mut io).poll_read(&mut cx, rb.unfilled());
            assert!(matches!(r, Poll::Ready(Ok(()))));
        }
        assert_eq!(rb.filled(), b"hello, world");
    }

    /// A reader with endless data.
    struct Endless;

    impl AsyncRead for Endless {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            buf.fill(b'x');
            Poll::Ready(Ok(buf.len()))
        }
    }

    #[test]
    fn read_size_adapts() {
        let mut io = WeftIo::new(Endless);
        let mut storage = vec![MaybeUninit::<u8>::uninit(); 1 << 20];
        let mut cx = Context::from_waker(Waker::noop());
        let mut sizes = Vec::new();
        for _ in 0..8 {
            let mut rb = ReadBuf::uninit(&mut storage);
            let r = Pin::new(&mut io).poll_read(&mut cx, rb.unfilled());
            assert!(matches!(r, Poll::Ready(Ok(()))));
            sizes.push(rb.filled().len());
        }
        assert_eq!(sizes, [1024, 2048, 4096, 8192, 16384, 32768, 65536, 65536]);
        // Small reads bring it back down.
        let mut small = WeftIo::new(Trickle(vec![b'y'; 1000], 10));
        small.next_read = MAX_READ;
        for _ in 0..10 {
            let mut rb = ReadBuf::uninit(&mut storage);
            let _ = Pin::new(&mut small).poll_read(&mut cx, rb.unfilled());
        }
        assert_eq!(small.next_read, MIN_READ);
    }

    #[test]
    fn writes_and_shuts_down() {
        let mut io = WeftIo::new(Vec::<u8>::new());
        let mut cx = Context::from_waker(Waker::noop());
        let r = Pin::new(&mut io).poll_write(&mut cx, b"abc");
        assert!(matches!(r, Poll::Ready(Ok(3))));
        let r = Pin::new(&mut io).poll_shutdown(&mut cx);
        assert!(matches!(r, Poll::Ready(Ok(()))));
        assert_eq!(io.into_inner(), b"abc");
    }

    fn assert_send_unpin<T: Send + Unpin>() {}

    #[test]
    fn send_and_unpin_for_weft_streams() {
        assert_send_unpin::<WeftIo<crate::net::TcpStream>>();
        assert_send_unpin::<WeftIo<crate::net::OwnedReadHalf>>();
    }
}
