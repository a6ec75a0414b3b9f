//! Review s43 (I/O and networking, second pass): `weft::io`'s extension futures
//! (`read_to_string` with bad UTF-8, `read_to_end` into spare capacity, zero-length
//! writes), the halves of split streams used from a task and a fiber at once and put
//! back together, blocking timeouts in fibers and threads, `peek`, `try_read` /
//! `try_write` against readiness, connected UDP, Unix datagrams, `from_std` /
//! `into_std`, a Unix writer whose peer shuts its read side, and (feature `hyper`)
//! `WeftIo` over a Unix stream and `WeftTimer`'s reset. Loopback only; every wait is
//! bounded.
//!
//! `cargo test -p weft --features hyper --test review_s43_io2`

mod common;
use common::{fiber_on, join_within, thread_within};

use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::io::{AsyncReadExt, AsyncWriteExt};
use weft::net::{TcpListener, TcpStream, UdpSocket, UnixDatagram, UnixStream};
use weft::Runtime;

fn rt(n: usize) -> Runtime {
    common::workers(n)
}

/// `n` bytes of a pattern that tells positions apart.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 251) as u8).collect()
}

/// A connected TCP pair on `rt`'s loopback.
fn tcp_pair(rt: &Runtime) -> (TcpStream, TcpStream) {
    rt.block_on(async {
        let l = TcpListener::bind(common::loopback()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = weft::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (s, _) = l.accept().await.unwrap();
        (c.await.unwrap(), s)
    })
}

/// A fresh directory for socket files.
fn sock_dir(tag: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "weft-s43-{}-{}-{}",
        tag,
        std::process::id(),
        N.fetch_add(1, SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A reader that hands out `data` in pieces of at most `step`, returning `Pending`
/// (and waking at once) between pieces, then fails or ends.
struct Pieces {
    data: Vec<u8>,
    at: usize,
    step: usize,
    pend: bool,
    fail_at_end: bool,
}

impl futures_io::AsyncRead for Pieces {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        use std::task::Poll;
        if self.pend {
            self.pend = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.pend = true;
        if self.at == self.data.len() {
            if self.fail_at_end {
                return Poll::Ready(Err(io::Error::other("boom")));
            }
            return Poll::Ready(Ok(0));
        }
        let n = buf.len().min(self.step).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(n))
    }
}

fn pieces(data: &[u8], step: usize, fail_at_end: bool) -> Pieces {
    Pieces {
        data: data.to_vec(),
        at: 0,
        step,
        pend: true,
        fail_at_end,
    }
}

// ---------------------------------------------------------------------------------
// weft::io
// ---------------------------------------------------------------------------------

/// tokio's and std's documented `read_to_string`: on bytes that are not UTF-8, an
/// `InvalidData` error and `buf` unchanged (what it held before stays, nothing is
/// appended); on valid ones, appended after what was there, the count being the
/// bytes read. Also over a socket, with the bad byte in the middle of a long stream.
#[test]
fn read_to_string_bad_utf8_leaves_buf_as_it_was() {
    common::with_timeout(|| {
        let rt = rt(2);
        rt.block_on(async {
            // In pieces, with the bad byte split off from its neighbours.
            for step in [1, 2, 3, 7, 64] {
                let mut data = "héllo wörld ".repeat(20).into_bytes();
                data.insert(100, 0xff);
                let mut s = String::from("kept: ");
                let e = pieces(&data, step, false)
                    .read_to_string(&mut s)
                    .await
                    .unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidData, "step {step}");
                assert_eq!(s, "kept: ", "step {step}");
                // Valid: appended, count of bytes (not chars).
                let good = "héllo wörld ".repeat(20);
                let mut s = String::from("kept: ");
                let n = pieces(good.as_bytes(), step, false)
                    .read_to_string(&mut s)
                    .await
                    .unwrap();
                assert_eq!(n, good.len());
                assert_eq!(s, format!("kept: {good}"));
                // An I/O error after valid bytes: buf unchanged too (tokio truncates).
                let mut s = String::from("kept: ");
                let e = pieces(good.as_bytes(), step, true)
                    .read_to_string(&mut s)
                    .await
                    .unwrap_err();
                assert_eq!(e.to_string(), "boom");
                assert_eq!(s, "kept: ");
            }
        });
        // Over TCP: 1 MiB of text with one bad byte near the end.
        let (mut a, mut b) = tcp_pair(&rt);
        let mut text = "abcdefghij".repeat(100_000).into_bytes();
        let at = text.len() - 3;
        text[at] = 0xc3; // a lead byte with no continuation ('h', 'i', 'j' follow)
        let w = rt.spawn(async move {
            b.write_all(&text).await.unwrap();
            AsyncWriteExt::shutdown(&mut b).await.unwrap();
            b
        });
        let r = rt.block_on(async {
            let mut s = String::from("x");
            let e = a.read_to_string(&mut s).await.unwrap_err();
            (e.kind(), s)
        });
        assert_eq!(r, (ErrorKind::InvalidData, "x".to_string()));
        drop(join_within(w, 20).unwrap());
    });
}

/// The resident memory of this process, in bytes.
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// `read_to_end` into a vector with a large spare capacity (a buffer kept for reuse,
/// or `Vec::with_capacity` sized for the largest message): std's and tokio's read into
/// the spare capacity without touching what the data does not reach (std in growing
/// chunks, tokio through an uninitialized `ReadBuf`), so a 5-byte stream costs a few
/// pages. weft's `poll_to_end` zeroed the whole capacity first, which committed every
/// page of it: a 256 MiB buffer made the process 256 MiB larger (and took that long
/// to zero) to read 5 bytes. It now zeroes a chunk at a time.
#[test]
fn read_to_end_does_not_commit_the_whole_spare_capacity() {
    common::with_timeout(|| {
        const CAP: usize = 256 << 20;
        let rt = rt(1);
        let mut buf: Vec<u8> = Vec::with_capacity(CAP);
        buf.extend_from_slice(b"head:");
        let before = rss();
        let n = rt.block_on(async {
            let mut src: &[u8] = b"hello";
            src.read_to_end(&mut buf).await.unwrap()
        });
        let grew = rss().saturating_sub(before);
        assert_eq!((n, &buf[..]), (5, &b"head:hello"[..]));
        assert!(
            grew < CAP / 4,
            "reading 5 bytes made the process {} MiB larger",
            grew >> 20
        );
        drop(buf);
    });
}

/// `write_all(&[])` and `write(&[])` on a socket return at once with nothing sent;
/// `flush` is a no-op; a shut socket's `write_all(&[])` is still `Ok` (nothing to
/// write, as tokio's); `shutdown` twice is fine; and the peer sees exactly the bytes
/// written in between.
#[test]
fn zero_length_writes_flush_and_shutdown() {
    common::with_timeout(|| {
        let rt = rt(2);
        let (mut a, mut b) = tcp_pair(&rt);
        rt.block_on(async {
            a.write_all(&[]).await.unwrap();
            assert_eq!(a.write(&[]).await.unwrap(), 0);
            a.flush().await.unwrap();
            a.write_all(b"abc").await.unwrap();
            a.write_all(&[]).await.unwrap();
            AsyncWriteExt::shutdown(&mut a).await.unwrap();
            AsyncWriteExt::shutdown(&mut a).await.unwrap();
            a.write_all(&[]).await.unwrap();
            let e = a.write_all(b"x").await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BrokenPipe);
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"abc");
            // read_exact of nothing at end of stream: Ok(0), as tokio's.
            assert_eq!(b.read_exact(&mut []).await.unwrap(), 0);
            let e = b.read_exact(&mut [0; 1]).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
        });
    });
}

// ---------------------------------------------------------------------------------
// Halves
// ---------------------------------------------------------------------------------

/// Two streams, each split: its read half in a task, its write half in a fiber (and
/// the other way round on the other end), 4 MiB each way at once. Every byte arrives,
/// once, in order; dropping the write halves ends the readers.
#[test]
fn owned_halves_in_a_task_and_a_fiber_both_ways_at_once() {
    common::big_watchdog(60, || {
        const N: usize = 4 << 20;
        let rt = rt(2);
        let (a, b) = tcp_pair(&rt);
        let (ar, aw) = a.into_split();
        let (br, bw) = b.into_split();
        let data = Arc::new(pattern(N));
        // a's writer: a fiber with blocking writes (halves have no std Write: use the
        // async one through weft::wait).
        let d = data.clone();
        let wa = fiber_on(&rt, move || {
            let mut aw = aw;
            for c in d.chunks(7919) {
                weft::wait(aw.write_all(c)).unwrap();
            }
        });
        // b's writer: a task.
        let d = data.clone();
        let wb = rt.spawn(async move {
            let mut bw = bw;
            for c in d.chunks(65_536 + 3) {
                bw.write_all(c).await.unwrap();
            }
        });
        // a's reader: a task; b's reader: a fiber.
        let ra = rt.spawn(async move {
            let mut ar = ar;
            let mut got = Vec::new();
            ar.read_to_end(&mut got).await.unwrap();
            got
        });
        let rb = fiber_on(&rt, move || {
            let mut br = br;
            let mut got = Vec::new();
            let mut buf = vec![0; 3001];
            loop {
                let n = weft::wait(br.read(&mut buf)).unwrap();
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&buf[..n]);
            }
        });
        join_within(wa, 40).unwrap();
        join_within(wb, 40).unwrap();
        let ga = join_within(ra, 40).unwrap();
        let gb = join_within(rb, 40).unwrap();
        assert!(ga == *data, "a read {} bytes, wrong", ga.len());
        assert!(gb == *data, "b read {} bytes, wrong", gb.len());
    });
}

/// `reunite` gives back a stream that is not shut (the write half's drop is
/// disarmed): it still writes, and the peer sees no end of stream until it is
/// dropped. Halves of two different streams give an error holding both, and dropping
/// those halves shuts the write side as usual. Also for Unix streams.
#[test]
fn reunite_keeps_the_stream_open_and_mismatches_give_the_halves_back() {
    common::with_timeout(|| {
        let rt = rt(2);
        let (a, mut b) = tcp_pair(&rt);
        let (c, mut d) = tcp_pair(&rt);
        rt.block_on(async {
            let (ar, aw) = a.into_split();
            let (cr, cw) = c.into_split();
            let err = ar.reunite(cw).unwrap_err();
            assert!(err.to_string().contains("not from the same stream"));
            let weft::net::ReuniteError(ar, cw) = err;
            let mut a = ar.reunite(aw).unwrap();
            a.write_all(b"still open").await.unwrap();
            let mut buf = [0; 10];
            b.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"still open");
            // No end of stream yet on b.
            let r = weft::time::timeout(Duration::from_millis(50), b.read(&mut buf)).await;
            assert!(r.is_err(), "b saw {r:?} with a still open");
            drop(a);
            assert_eq!(b.read(&mut buf).await.unwrap(), 0);
            // c's halves, given back by the failed reunite: dropping the write half
            // shuts c's write side while its read half still reads.
            drop(cw);
            assert_eq!(d.read(&mut buf).await.unwrap(), 0);
            d.write_all(b"back").await.unwrap();
            let mut cr = cr;
            let mut four = [0; 4];
            cr.read_exact(&mut four).await.unwrap();
            assert_eq!(&four, b"back");
        });
        // Unix streams: the same.
        let (x, mut y) = rt.block_on(async { UnixStream::pair().unwrap() });
        rt.block_on(async {
            let (xr, xw) = x.into_split();
            let mut x = xr.reunite(xw).unwrap();
            x.write_all(b"u").await.unwrap();
            let mut one = [0; 1];
            y.read_exact(&mut one).await.unwrap();
            assert_eq!(&one, b"u");
        });
    });
}

/// Borrowed halves used at once by two futures of one task (`join`-like, polled in
/// turn): a 2 MiB echo through them never stalls, and dropping the borrowed write half
/// does not shut the stream (tokio's does not either).
#[test]
fn borrowed_halves_echo_in_one_task() {
    common::big_watchdog(60, || {
        const N: usize = 2 << 20;
        let rt = rt(2);
        let (mut a, mut b) = tcp_pair(&rt);
        let data = pattern(N);
        let d = data.clone();
        let echo = rt.spawn(async move {
            {
                let (mut r, mut w) = b.split();
                let mut buf = vec![0; 10_007];
                let mut total = 0;
                while total < N {
                    let n = r.read(&mut buf).await.unwrap();
                    assert!(n > 0);
                    w.write_all(&buf[..n]).await.unwrap();
                    total += n;
                }
            }
            // The borrowed write half is gone; b still writes.
            b.write_all(b"!").await.unwrap();
            b
        });
        let got = rt.block_on(async move {
            let (mut r, mut w) = a.split();
            let writer = async {
                for c in d.chunks(30_011) {
                    w.write_all(c).await.unwrap();
                }
            };
            let reader = async {
                let mut got = vec![0; N + 1];
                r.read_exact(&mut got).await.unwrap();
                got
            };
            let (_, got) = join2(writer, reader).await;
            got
        });
        assert_eq!(got.len(), N + 1);
        assert!(got[..N] == data[..], "echo corrupted");
        assert_eq!(got[N], b'!');
        drop(join_within(echo, 20).unwrap());
    });
}

/// Polls two futures in turn until both are done.
async fn join2<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let mut ra = None;
    let mut rb = None;
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

// ---------------------------------------------------------------------------------
// Timeouts, peek, try_ forms
// ---------------------------------------------------------------------------------

/// A blocking read with a read timeout, in a fiber and on a plain thread: times out
/// with `WouldBlock` (not before the timeout, not much after), loses nothing, and the
/// next read gets exactly what was sent later. A write timeout on a full buffer: the
/// same, and the bytes a timed-out write reported are the ones the peer gets.
#[test]
fn blocking_timeouts_in_fibers_and_threads_lose_nothing() {
    use std::io::{Read, Write};
    common::with_timeout(|| {
        let rt = rt(2);
        for in_fiber in [true, false] {
            let (a, b) = tcp_pair(&rt);
            a.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
            assert_eq!(a.read_timeout().unwrap(), Some(Duration::from_millis(30)));
            let a = Arc::new(a);
            let a2 = a.clone();
            let body = move || {
                let mut buf = [0; 16];
                let t = Instant::now();
                let e = (&*a2).read(&mut buf).unwrap_err();
                let took = t.elapsed();
                assert_eq!(e.kind(), ErrorKind::WouldBlock);
                assert!(
                    took >= Duration::from_millis(29),
                    "timed out after {took:?}"
                );
                // Second one: data comes meanwhile (the test thread sends it).
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(10);
                while got.len() < 6 && Instant::now() < deadline {
                    match (&*a2).read(&mut buf) {
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            };
            let got = if in_fiber {
                let h = fiber_on(&rt, body);
                std::thread::sleep(Duration::from_millis(60));
                (&b).write_all(b"abcdef").unwrap();
                join_within(h, 20).unwrap()
            } else {
                let h = std::thread::spawn(body);
                std::thread::sleep(Duration::from_millis(60));
                (&b).write_all(b"abcdef").unwrap();
                thread_within(h, 20)
            };
            assert_eq!(got, b"abcdef", "in_fiber {in_fiber}");
            // Write timeout: fill a's send path until a write times out, counting.
            a.set_write_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let a3 = a.clone();
            let fill = move || {
                let chunk = vec![7u8; 64 << 10];
                let mut sent = 0usize;
                for _ in 0..4096 {
                    match (&*a3).write(&chunk) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return sent,
                        Err(e) => panic!("{e}"),
                    }
                }
                panic!("never timed out after {sent} bytes");
            };
            let sent = if in_fiber {
                join_within(fiber_on(&rt, fill), 20).unwrap()
            } else {
                thread_within(std::thread::spawn(fill), 20)
            };
            a.shutdown(Shutdown::Write).unwrap();
            let mut all = Vec::new();
            b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            (&b).read_to_end(&mut all).unwrap();
            assert_eq!(all.len(), sent, "in_fiber {in_fiber}");
            assert!(all.iter().all(|&x| x == 7));
        }
    });
}

/// `peek` shows the same bytes the next read takes, from the stream and from its
/// owned read half; a peek waits for data (bounded here); UDP `peek_from` then
/// `recv_from` return the same datagram and sender.
#[test]
fn peek_then_read_agree() {
    common::with_timeout(|| {
        let rt = rt(2);
        let (mut a, b) = tcp_pair(&rt);
        rt.block_on(async {
            let mut p = [0; 8];
            let r = weft::time::timeout(Duration::from_millis(30), b.peek(&mut p)).await;
            assert!(r.is_err(), "peek on nothing returned {r:?}");
            a.write_all(b"peekaboo").await.unwrap();
            let mut got = 0;
            for _ in 0..1000 {
                got = b.peek(&mut p).await.unwrap();
                if got == 8 {
                    break;
                }
                weft::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(&p[..got], b"peekaboo");
            let (mut br, _bw) = b.into_split();
            let mut q = [0; 4];
            assert_eq!(br.peek(&mut q).await.unwrap(), 4);
            assert_eq!(&q, b"peek");
            let mut r = [0; 8];
            br.read_exact(&mut r).await.unwrap();
            assert_eq!(&r, b"peekaboo");
        });
        rt.block_on(async {
            let x = UdpSocket::bind(common::loopback()).await.unwrap();
            let y = UdpSocket::bind(common::loopback()).await.unwrap();
            x.send_to(b"dgram", y.local_addr().unwrap()).await.unwrap();
            let mut p = [0; 16];
            let (n, from) = y.peek_from(&mut p).await.unwrap();
            assert_eq!((&p[..n], from), (&b"dgram"[..], x.local_addr().unwrap()));
            let (n, from) = y.recv_from(&mut p).await.unwrap();
            assert_eq!((&p[..n], from), (&b"dgram"[..], x.local_addr().unwrap()));
            assert_eq!(
                y.try_recv_from(&mut p).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
        });
    });
}

/// `try_write` until `WouldBlock`, then `writable()` waits (does not return at once
/// for ever: a `WouldBlock` clears the readiness) and ends once the peer reads;
/// `try_read` on nothing is `WouldBlock` and `readable()` then waits until data.
/// Everything written by `try_write` arrives. Also through the owned halves.
#[test]
fn try_forms_against_readiness() {
    common::with_timeout(|| {
        let rt = rt(2);
        for _round in 0..2 {
            let (a, b) = tcp_pair(&rt);
            let (ar, aw) = a.into_split();
            let (mut br, bw) = b.into_split();
            let reader = rt.spawn(async move {
                let mut buf = [0; 4];
                assert_eq!(
                    ar.try_read(&mut buf).unwrap_err().kind(),
                    ErrorKind::WouldBlock
                );
                ar.readable().await.unwrap();
                // May still be WouldBlock: loop, bounded.
                for _ in 0..10_000 {
                    match ar.try_read(&mut buf) {
                        Ok(n) => return buf[..n].to_vec(),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => ar.readable().await.unwrap(),
                        Err(e) => panic!("{e}"),
                    }
                }
                panic!("readable() spun");
            });
            std::thread::sleep(Duration::from_millis(20));
            rt.block_on(async {
                let mut bw = bw;
                bw.write_all(b"ok").await.unwrap();
            });
            assert_eq!(join_within(reader, 10).unwrap(), b"ok");
            // Fill with try_write.
            let written = rt.block_on(async {
                let chunk = vec![9u8; 32 << 10];
                let mut total = 0usize;
                let mut would_block = 0;
                for _ in 0..100_000 {
                    match aw.try_write(&chunk) {
                        Ok(n) => total += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            would_block += 1;
                            // writable() must not be ready for ever now: bounded look.
                            let r =
                                weft::time::timeout(Duration::from_millis(30), aw.writable()).await;
                            if r.is_err() {
                                break;
                            }
                            assert!(
                                would_block < 1000,
                                "writable() ready, try_write WouldBlock, spinning"
                            );
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                total
            });
            assert!(written > 0);
            // The peer reads everything; then writable() ends.
            let drain = rt.spawn(async move {
                let mut got = vec![0; written];
                br.read_exact(&mut got).await.unwrap();
                assert!(got.iter().all(|&x| x == 9));
                br
            });
            rt.block_on(async {
                weft::time::timeout(Duration::from_secs(10), aw.writable())
                    .await
                    .expect("writable() after the peer drained")
                    .unwrap();
            });
            drop(join_within(drain, 20).unwrap());
        }
    });
}

// ---------------------------------------------------------------------------------
// UDP and Unix datagrams
// ---------------------------------------------------------------------------------

/// A connected UDP socket: `send` goes to the peer, `recv` takes only the peer's
/// datagrams (a third socket's are filtered by the kernel), zero-length datagrams
/// count, a datagram longer than the buffer is cut; from a task, a fiber and a plain
/// thread's blocking forms. `send` on an unconnected socket is an error, not a wait.
#[test]
fn connected_udp_from_every_context() {
    common::with_timeout(|| {
        let rt = rt(2);
        let (x, y, z) = rt.block_on(async {
            let x = UdpSocket::bind(common::loopback()).await.unwrap();
            let y = UdpSocket::bind(common::loopback()).await.unwrap();
            let z = UdpSocket::bind(common::loopback()).await.unwrap();
            let e = x.send(b"nowhere").await.unwrap_err();
            assert_ne!(e.kind(), ErrorKind::WouldBlock);
            x.connect(y.local_addr().unwrap()).await.unwrap();
            y.connect(x.local_addr().unwrap()).await.unwrap();
            (Arc::new(x), Arc::new(y), z)
        });
        rt.block_on(async {
            // z's datagram to x is dropped (x is connected to y).
            z.send_to(b"intruder", x.local_addr().unwrap())
                .await
                .unwrap();
            y.send(b"").await.unwrap();
            y.send(b"0123456789").await.unwrap();
            let mut buf = [0; 4];
            assert_eq!(x.recv(&mut buf).await.unwrap(), 0);
            assert_eq!(x.recv(&mut buf).await.unwrap(), 4);
            assert_eq!(&buf, b"0123");
            assert_eq!(
                x.try_recv(&mut buf).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
        });
        // A fiber receives, a thread sends, and back.
        let x2 = x.clone();
        let f = fiber_on(&rt, move || {
            let mut buf = [0; 32];
            let n = x2.recv_blocking(&mut buf).unwrap();
            x2.send_blocking(&buf[..n]).unwrap();
            buf[..n].to_vec()
        });
        let y2 = y.clone();
        let t = std::thread::spawn(move || {
            y2.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            y2.send_blocking(b"round trip").unwrap();
            let mut buf = [0; 32];
            let n = y2.recv_blocking(&mut buf).unwrap();
            buf[..n].to_vec()
        });
        assert_eq!(join_within(f, 20).unwrap(), b"round trip");
        assert_eq!(thread_within(t, 20), b"round trip");
    });
}

/// Unix datagrams: a pair, a bound socket with a connected unbound one, zero-length
/// datagrams, truncation, a receive shut for reading returns 0 after the queued
/// datagrams, and `into_std` / `from_std` in between keeps what is queued.
#[test]
fn unix_datagrams_edges() {
    common::with_timeout(|| {
        let rt = rt(2);
        let dir = sock_dir("ud");
        let path = dir.join("srv.sock");
        rt.block_on(async {
            let srv = UnixDatagram::bind(&path).unwrap();
            let cli = UnixDatagram::unbound().unwrap();
            cli.connect(&path).unwrap();
            cli.send(b"").await.unwrap();
            cli.send(b"abcdef").await.unwrap();
            let mut buf = [0; 3];
            let (n, _) = srv.recv_from(&mut buf).await.unwrap();
            assert_eq!(n, 0);
            let (n, _) = srv.recv_from(&mut buf).await.unwrap();
            assert_eq!((n, &buf), (3, b"abc"));
            // into_std with a datagram queued, then back in.
            cli.send(b"queued").await.unwrap();
            let std_srv = srv.into_std().unwrap();
            let srv = UnixDatagram::from_std(std_srv).unwrap();
            let mut buf = [0; 16];
            let (n, _) = weft::time::timeout(Duration::from_secs(5), srv.recv_from(&mut buf))
                .await
                .expect("queued datagram lost across into_std/from_std")
                .unwrap();
            assert_eq!(&buf[..n], b"queued");
            // Shut for reading with one queued: that one first, then 0.
            cli.send(b"last").await.unwrap();
            srv.shutdown(Shutdown::Read).unwrap();
            let mut buf = [0; 16];
            let n = srv.recv(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"last");
            assert_eq!(srv.recv(&mut buf).await.unwrap(), 0);
        });
        let (p, q) = rt.block_on(async { UnixDatagram::pair().unwrap() });
        let f = fiber_on(&rt, move || {
            let mut buf = [0; 8];
            let n = q.recv_blocking(&mut buf).unwrap();
            q.send_blocking(&buf[..n]).unwrap();
            q
        });
        std::thread::sleep(Duration::from_millis(10));
        p.send_blocking(b"pair").unwrap();
        let mut buf = [0; 8];
        p.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let n = p.recv_blocking(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"pair");
        drop(join_within(f, 10).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// `from_std` of a blocking std stream with data already queued and its peer gone:
/// the async read sees all of it and then the end; `into_std` then gives a
/// non-blocking std stream that a second runtime takes in with nothing lost.
#[test]
fn from_std_into_std_across_runtimes_lose_nothing() {
    common::with_timeout(|| {
        let rt1 = rt(1);
        let rt2 = rt(1);
        let l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        std::io::Write::write_all(&mut c, b"first").unwrap();
        let s = rt1.block_on(async move {
            let mut s = TcpStream::from_std(s).unwrap();
            let mut five = [0; 5];
            s.read_exact(&mut five).await.unwrap();
            assert_eq!(&five, b"first");
            s
        });
        std::io::Write::write_all(&mut c, b"second").unwrap();
        let std_s = s.into_std().unwrap();
        std::io::Write::write_all(&mut c, b"third").unwrap();
        drop(c);
        let got = rt2.block_on(async move {
            let mut s = TcpStream::from_std(std_s).unwrap();
            let mut got = Vec::new();
            weft::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
                .await
                .expect("hang reading in the second runtime")
                .unwrap();
            got
        });
        assert_eq!(got, b"secondthird");
    });
}

// ---------------------------------------------------------------------------------
// A Unix writer whose peer shuts its read side
// ---------------------------------------------------------------------------------

/// Fills `s`'s send path (non-blocking std writes) and returns how much went.
fn fill_std(s: &std::os::unix::net::UnixStream) -> usize {
    use std::io::Write;
    s.set_nonblocking(true).unwrap();
    let chunk = vec![1u8; 64 << 10];
    let mut total = 0;
    for _ in 0..100_000 {
        match (&*s).write(&chunk) {
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    s.set_nonblocking(false).unwrap();
    total
}

/// A writer blocked on a full Unix stream whose peer then shuts its *read* side
/// (without closing): std's blocking write fails at once with `BrokenPipe`, but Linux's
/// epoll reports no event for that shutdown, so a weft writer (blocking form in a
/// thread and a fiber, and the async form, as tokio's) waits until the peer closes:
/// documented on `UnixStream`. Checked here: every form then ends with `BrokenPipe`,
/// none hangs.
#[test]
fn unix_writer_blocked_when_peer_shuts_read_ends_when_it_closes() {
    use std::io::Write;
    common::with_timeout(|| {
        // Control: std.
        let (w, r) = std::os::unix::net::UnixStream::pair().unwrap();
        fill_std(&w);
        let t = std::thread::spawn(move || {
            let r = (&w).write(&[2u8; 4096]);
            r.map_err(|e| e.kind())
        });
        std::thread::sleep(Duration::from_millis(50));
        r.shutdown(Shutdown::Read).unwrap();
        let res = thread_within(t, 5);
        assert_eq!(res, Err(ErrorKind::BrokenPipe), "std control");
        drop(r);

        // weft, blocking form on a plain thread and in a fiber, then the async form.
        let rt = rt(2);
        let mut outcomes = Vec::new();
        for how in ["thread", "fiber", "task"] {
            let (w, r) = rt.block_on(async { UnixStream::pair().unwrap() });
            let std_w = w.into_std().unwrap();
            fill_std(&std_w);
            let w = Arc::new(rt.block_on(async { UnixStream::from_std(std_w).unwrap() }));
            let done = Arc::new(AtomicBool::new(false));
            let (w2, d2) = (w.clone(), done.clone());
            let body = move || {
                let r = (&*w2).write(&[2u8; 4096]).map_err(|e| e.kind());
                d2.store(true, SeqCst);
                r
            };
            let h: Box<dyn FnOnce() -> Result<usize, ErrorKind>> = match how {
                "thread" => {
                    let t = std::thread::spawn(body);
                    Box::new(move || thread_within(t, 10))
                }
                "fiber" => {
                    let f = fiber_on(&rt, body);
                    Box::new(move || join_within(f, 10).unwrap())
                }
                _ => {
                    let w3 = w.clone();
                    let d3 = done.clone();
                    let task = rt.spawn(async move {
                        // The async form on a shared stream: writable() then try_write.
                        let r = loop {
                            match w3.try_write(&[2u8; 4096]) {
                                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                    if let Err(e) = w3.writable().await {
                                        break Err(e.kind());
                                    }
                                }
                                r => break r.map_err(|e| e.kind()),
                            }
                        };
                        d3.store(true, SeqCst);
                        r
                    });
                    Box::new(move || join_within(task, 10).unwrap())
                }
            };
            std::thread::sleep(Duration::from_millis(50));
            assert!(!done.load(SeqCst), "{how}: the write did not block");
            r.shutdown(Shutdown::Read).unwrap();
            let deadline = Instant::now() + Duration::from_millis(200);
            while !done.load(SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let woke = done.load(SeqCst);
            // Unblock it either way so the test ends.
            drop(r);
            let res = h();
            outcomes.push((how, woke, res));
        }
        assert!(
            outcomes
                .iter()
                .all(|(_, _, res)| *res == Err(ErrorKind::BrokenPipe)),
            "(context, woke within 200 ms, result once the peer was dropped): {outcomes:?}"
        );
    });
}

// ---------------------------------------------------------------------------------
// hyper
// ---------------------------------------------------------------------------------

#[cfg(feature = "hyper")]
mod hyper_side {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper::rt::{Executor, Timer};
    use weft::hyper::{WeftExecutor, WeftIo, WeftTimer};

    /// hyper's client and server over a weft Unix stream pair (each half a `WeftIo`),
    /// keep-alive requests with bodies of several sizes (0 to 1 MiB) echoed back
    /// exactly; the server's header-read timer runs on `WeftTimer`.
    #[test]
    fn hyper_over_unix_streams_echoes_bodies() {
        common::big_watchdog(60, || {
            let rt = rt(2);
            rt.block_on(async {
                let (c, s) = UnixStream::pair().unwrap();
                let server = weft::spawn(async move {
                    let service = hyper::service::service_fn(
                        |req: hyper::Request<hyper::body::Incoming>| async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(body)))
                        },
                    );
                    hyper::server::conn::http1::Builder::new()
                        .timer(WeftTimer::new())
                        .header_read_timeout(Duration::from_secs(20))
                        .serve_connection(WeftIo::new(s), service)
                        .await
                });
                let (mut sender, conn) = hyper::client::conn::http1::handshake(WeftIo::new(c))
                    .await
                    .unwrap();
                let (tx, rx) = futures_channel::oneshot::channel();
                WeftExecutor::new().execute(async move {
                    let _ = tx.send(conn.await);
                });
                for size in [0usize, 1, 1000, 65_536, 65_537, 1 << 20] {
                    let body = pattern(size);
                    let req = hyper::Request::post("/")
                        .body(Full::new(Bytes::from(body.clone())))
                        .unwrap();
                    // (hyper's client: wait for the connection to be idle again.)
                    sender.ready().await.unwrap();
                    let res = sender.send_request(req).await.unwrap();
                    let got = res.into_body().collect().await.unwrap().to_bytes();
                    assert!(got[..] == body[..], "size {size}: got {}", got.len());
                }
                drop(sender);
                rx.await.unwrap().unwrap();
                server.await.unwrap().unwrap();
            });
        });
    }

    /// `WeftTimer::reset`: a polled sleep moved earlier fires at the new deadline, one
    /// moved later does not fire at the old one, one moved to the past is ready at the
    /// next poll; a sleep reset without a poll since and then awaited fires; a sleep
    /// dropped on another thread after its runtime is gone is fine.
    #[test]
    fn weft_timer_reset_moves_and_drops() {
        common::with_timeout(|| {
            let rt = rt(2);
            let timer = WeftTimer::new();
            let leftover = rt.block_on(async move {
                // Earlier.
                let mut s = timer.sleep(Duration::from_secs(60));
                assert!(weft::time::timeout(Duration::from_millis(2), &mut s)
                    .await
                    .is_err());
                let t = Instant::now();
                timer.reset(&mut s, Instant::now() + Duration::from_millis(20));
                weft::time::timeout(Duration::from_secs(10), &mut s)
                    .await
                    .expect("reset earlier: did not fire");
                assert!(t.elapsed() >= Duration::from_millis(19));
                // Later.
                let mut s = timer.sleep(Duration::from_millis(10));
                assert!(weft::time::timeout(Duration::from_millis(1), &mut s)
                    .await
                    .is_err());
                timer.reset(&mut s, Instant::now() + Duration::from_secs(60));
                assert!(weft::time::timeout(Duration::from_millis(60), &mut s)
                    .await
                    .is_err());
                // Past.
                timer.reset(&mut s, Instant::now() - Duration::from_millis(5));
                weft::time::timeout(Duration::from_secs(5), &mut s)
                    .await
                    .expect("reset to the past: not ready");
                // Reset twice without a poll, then awaited.
                let mut s = timer.sleep(Duration::from_secs(60));
                timer.reset(&mut s, Instant::now() + Duration::from_secs(30));
                timer.reset(&mut s, Instant::now() + Duration::from_millis(5));
                weft::time::timeout(Duration::from_secs(10), &mut s)
                    .await
                    .expect("reset unpolled: did not fire");
                // A pending one to outlive the runtime.
                let mut s = timer.sleep(Duration::from_secs(60));
                assert!(weft::time::timeout(Duration::from_millis(1), &mut s)
                    .await
                    .is_err());
                SendSleep(s)
            });
            common::drop_within(rt, Duration::from_secs(10), "runtime with a hyper sleep");
            let t = std::thread::spawn(move || drop(leftover));
            thread_within(t, 5);
        });
    }

    /// hyper's `Sleep` box is `Send` but not nameable as such through the trait
    /// object in a `block_on` output without this wrapper.
    struct SendSleep(#[allow(dead_code)] std::pin::Pin<Box<dyn hyper::rt::Sleep>>);
}

/// The read and write timeouts are the blocking forms' only: an async read on a
/// stream with a 1 ms read timeout waits as long as it takes (here 80 ms) and gets the
/// data, as tokio's (which has no socket timeouts) and as the rustdoc says.
#[test]
fn socket_timeouts_do_not_touch_the_async_forms() {
    common::with_timeout(|| {
        let rt = rt(2);
        let (mut a, mut b) = tcp_pair(&rt);
        a.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        b.set_write_timeout(Some(Duration::from_millis(1))).unwrap();
        let late = rt.spawn(async move {
            weft::time::sleep(Duration::from_millis(80)).await;
            b.write_all(b"late").await.unwrap();
            b
        });
        let got = rt.block_on(async {
            let mut four = [0; 4];
            a.read_exact(&mut four).await.unwrap();
            four
        });
        assert_eq!(&got, b"late");
        drop(join_within(late, 10).unwrap());
    });
}
