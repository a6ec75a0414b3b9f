//! tokio's async I/O method names over `futures_io`'s traits: `read`, `read_exact`,
//! `read_to_end`, `read_to_string`, `write`, `write_all`, `flush`, `shutdown`.
//!
//! weft's sockets implement `futures_io::AsyncRead` and `AsyncWrite` and no inherent
//! `read`/`write` (those would shadow `std::io::Read`/`Write` in blocking code); these
//! extension traits, implemented for every `futures_io` type, give async code the
//! names it knows. A tokio user renames `tokio::io::AsyncWriteExt` to
//! `weft::io::AsyncWriteExt`.
//!
//! Two differences from tokio follow from weft's sockets also serving blocking code.
//! `TcpStream::shutdown(&self, how)` is an inherent method (std's form), and an
//! inherent method wins over a trait's: write `AsyncWriteExt::shutdown(&mut stream)`
//! for the async one (`stream.shutdown().await` does not compile). And a module that
//! imports `std::io::{Read, Write}` as well as these traits must name the trait for
//! `read`, `write_all` or `flush` on a weft socket, which implements both.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

pub use futures_io::{AsyncRead, AsyncWrite};

/// Async reads by tokio's names, for every [`AsyncRead`].
///
/// ```
/// use weft::io::AsyncReadExt;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut src: &[u8] = b"hello world";
///     let mut word = [0; 5];
///     assert_eq!(src.read_exact(&mut word).await.unwrap(), 5);
///     let mut rest = String::new();
///     src.read_to_string(&mut rest).await.unwrap();
///     assert_eq!((&word, rest.as_str()), (b"hello", " world"));
/// });
/// ```
pub trait AsyncReadExt: AsyncRead {
    /// Reads some bytes into `buf`; 0 at end of stream.
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> ReadFut<'a, Self>
    where
        Self: Unpin,
    {
        ReadFut { r: self, buf }
    }

    /// Fills `buf` whole; `UnexpectedEof` if the stream ends first. Returns
    /// `buf.len()`.
    ///
    /// Not cancel safe: dropped while pending, the future has read a part of `buf`
    /// from the stream and does not say how much (as tokio's).
    fn read_exact<'a>(&'a mut self, buf: &'a mut [u8]) -> ReadExact<'a, Self>
    where
        Self: Unpin,
    {
        ReadExact {
            r: self,
            buf,
            filled: 0,
        }
    }

    /// Reads to the end of the stream, appending to `buf`; returns how many bytes.
    ///
    /// Cancel safe as far as the data goes: dropped while pending, the future leaves
    /// `buf` holding what it held plus every byte read so far. While it is pending,
    /// `buf` is lengthened to its capacity with zeroes past the data (the future
    /// truncates it when it ends or is dropped); a future leaked with `mem::forget`
    /// leaves those zeroes in `buf`.
    fn read_to_end<'a>(&'a mut self, buf: &'a mut Vec<u8>) -> ReadToEnd<'a, Self>
    where
        Self: Unpin,
    {
        let start = buf.len();
        ReadToEnd {
            r: self,
            buf,
            start,
            len: start,
        }
    }

    /// Reads to the end of the stream, appending UTF-8 to `buf` (nothing is appended
    /// if the bytes are not UTF-8: `InvalidData`); returns how many bytes.
    ///
    /// Not cancel safe: the bytes are appended only at the end of the stream, so a
    /// future dropped while pending, or one that fails with an I/O error, loses what
    /// it had read (as tokio's). Use [`read_to_end`](Self::read_to_end) to keep them.
    fn read_to_string<'a>(&'a mut self, buf: &'a mut String) -> ReadToString<'a, Self>
    where
        Self: Unpin,
    {
        ReadToString {
            r: self,
            buf,
            bytes: Vec::new(),
            len: 0,
        }
    }
}

impl<R: AsyncRead + ?Sized> AsyncReadExt for R {}

/// Async writes by tokio's names, for every [`AsyncWrite`].
///
/// ```
/// use weft::io::AsyncWriteExt;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut out = Vec::new();
///     out.write_all(b"hi").await.unwrap();
///     out.flush().await.unwrap();
///     assert_eq!(out, b"hi");
/// });
/// ```
pub trait AsyncWriteExt: AsyncWrite {
    /// Writes some of `buf`; returns how much.
    fn write<'a>(&'a mut self, buf: &'a [u8]) -> WriteFut<'a, Self>
    where
        Self: Unpin,
    {
        WriteFut { w: self, buf }
    }

    /// Writes all of `buf`; `WriteZero` if the writer stops taking bytes.
    ///
    /// Not cancel safe: dropped while pending, the future may have written a part of
    /// `buf` and does not say how much (as tokio's).
    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> WriteAll<'a, Self>
    where
        Self: Unpin,
    {
        WriteAll { w: self, buf }
    }

    /// Flushes buffered data.
    fn flush(&mut self) -> Flush<'_, Self>
    where
        Self: Unpin,
    {
        Flush { w: self }
    }

    /// Shuts the write side (`poll_close`): the peer reads end of stream.
    fn shutdown(&mut self) -> Shutdown<'_, Self>
    where
        Self: Unpin,
    {
        Shutdown { w: self }
    }
}

impl<W: AsyncWrite + ?Sized> AsyncWriteExt for W {}

/// The future of [`AsyncReadExt::read`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct ReadFut<'a, R: ?Sized> {
    r: &'a mut R,
    buf: &'a mut [u8],
}

impl<R: AsyncRead + Unpin + ?Sized> Future for ReadFut<'_, R> {
    type Output = io::Result<usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        Pin::new(&mut *this.r).poll_read(cx, this.buf)
    }
}

/// The future of [`AsyncReadExt::read_exact`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct ReadExact<'a, R: ?Sized> {
    r: &'a mut R,
    buf: &'a mut [u8],
    filled: usize,
}

impl<R: AsyncRead + Unpin + ?Sized> Future for ReadExact<'_, R> {
    type Output = io::Result<usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        while this.filled < this.buf.len() {
            match Pin::new(&mut *this.r).poll_read(cx, &mut this.buf[this.filled..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the stream ended before the buffer was filled",
                    )))
                }
                // Clamped to the room left, as `read_to_end` does: a reader that
                // claims more than it was given overflowed the count (found in review).
                Poll::Ready(Ok(n)) => this.filled += n.min(this.buf.len() - this.filled),
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(this.buf.len()))
    }
}

/// Reads until end of stream into `buf`, growing it. `len` is how much of `buf` holds
/// data; past it, up to `buf.len()`, are bytes already initialized (zeroed once, when
/// the vector grew, then whatever the reader left there), so each byte of new
/// capacity is zeroed once, not before every read (found in review: zeroing the whole
/// spare capacity before each read made a read in small pieces quadratic). The owner
/// truncates `buf` to `len` when it is done or dropped.
fn poll_to_end<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    cx: &mut Context<'_>,
    buf: &mut Vec<u8>,
    len: &mut usize,
) -> Poll<io::Result<()>> {
    loop {
        if *len == buf.len() {
            if buf.capacity() - buf.len() < 32 {
                buf.reserve(buf.capacity().max(64));
            }
            // A chunk at a time, as large as what the buffer holds (8 KiB at least), not
            // the whole spare capacity: zeroing commits its pages, and a short read
            // into a vector made with a large capacity grew the process by all of it
            // (found in review). Doubling keeps the zeroing linear in what is read.
            let chunk = buf.len().max(8 * 1024);
            buf.resize(buf.capacity().min(buf.len() + chunk), 0);
        }
        let spare = &mut buf[*len..];
        let room = spare.len();
        match Pin::new(&mut *r).poll_read(cx, spare) {
            Poll::Ready(Ok(0)) => {
                buf.truncate(*len);
                return Poll::Ready(Ok(()));
            }
            // (A reader that claims more than it was given is wrong; it gets no more.)
            Poll::Ready(Ok(n)) => *len += n.min(room),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Poll::Ready(Err(e)) => {
                buf.truncate(*len);
                return Poll::Ready(Err(e));
            }
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// The future of [`AsyncReadExt::read_to_end`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct ReadToEnd<'a, R: ?Sized> {
    r: &'a mut R,
    buf: &'a mut Vec<u8>,
    start: usize,
    /// How much of `buf` holds data (see `poll_to_end`).
    len: usize,
}

impl<R: AsyncRead + Unpin + ?Sized> Future for ReadToEnd<'_, R> {
    type Output = io::Result<usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match poll_to_end(this.r, cx, this.buf, &mut this.len) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(this.len - this.start)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<R: ?Sized> Drop for ReadToEnd<'_, R> {
    /// Dropped while pending: the vector keeps the bytes read so far, and only them.
    fn drop(&mut self) {
        self.buf.truncate(self.len);
    }
}

/// The future of [`AsyncReadExt::read_to_string`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct ReadToString<'a, R: ?Sized> {
    r: &'a mut R,
    buf: &'a mut String,
    bytes: Vec<u8>,
    /// How much of `bytes` holds data (see `poll_to_end`).
    len: usize,
}

impl<R: AsyncRead + Unpin + ?Sized> Future for ReadToString<'_, R> {
    type Output = io::Result<usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match poll_to_end(this.r, cx, &mut this.bytes, &mut this.len) {
            Poll::Ready(Ok(())) => {
                let n = this.len;
                let bytes = std::mem::take(&mut this.bytes);
                this.len = 0;
                match String::from_utf8(bytes) {
                    Ok(s) => {
                        this.buf.push_str(&s);
                        Poll::Ready(Ok(n))
                    }
                    Err(_) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "stream did not contain valid UTF-8",
                    ))),
                }
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The future of [`AsyncWriteExt::write`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct WriteFut<'a, W: ?Sized> {
    w: &'a mut W,
    buf: &'a [u8],
}

impl<W: AsyncWrite + Unpin + ?Sized> Future for WriteFut<'_, W> {
    type Output = io::Result<usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        Pin::new(&mut *this.w).poll_write(cx, this.buf)
    }
}

/// The future of [`AsyncWriteExt::write_all`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct WriteAll<'a, W: ?Sized> {
    w: &'a mut W,
    buf: &'a [u8],
}

impl<W: AsyncWrite + Unpin + ?Sized> Future for WriteAll<'_, W> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        while !this.buf.is_empty() {
            match Pin::new(&mut *this.w).poll_write(cx, this.buf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the writer took no bytes",
                    )))
                }
                // A writer that claims more than it was given is broken: an error, not
                // success (the bytes' fate is unknown) and not a panic on the slice (as
                // std's and tokio's; found in review).
                Poll::Ready(Ok(n)) if n > this.buf.len() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the writer claimed more bytes than it was given",
                    )))
                }
                Poll::Ready(Ok(n)) => this.buf = &this.buf[n..],
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The future of [`AsyncWriteExt::flush`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Flush<'a, W: ?Sized> {
    w: &'a mut W,
}

impl<W: AsyncWrite + Unpin + ?Sized> Future for Flush<'_, W> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut *self.w).poll_flush(cx)
    }
}

/// The future of [`AsyncWriteExt::shutdown`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Shutdown<'a, W: ?Sized> {
    w: &'a mut W,
}

impl<W: AsyncWrite + Unpin + ?Sized> Future for Shutdown<'_, W> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut *self.w).poll_close(cx)
    }
}
