//! Review s42 of the network layer (`weft::net`, `weft::io`, `weft::signal`, the
//! `hyper` feature), attacked from safe code through the public API only: one socket
//! used from a task, a fiber and a plain thread at once; runtimes dropped under
//! waiters of every kind; lost-wakeup ping-pongs across contexts; peeks racing
//! `try_read`s; descriptor and registration counts over a thousand cycles; peers
//! resetting mid-read; hyper connections cut mid-request and mid-response; hyper's
//! timer reset and dropped. Loopback only; every wait is bounded.
//!
//! No defect found: every test here passes (none is ignored). Two behaviours seen on the
//! way are by design and tokio's too, so not asserted: `accept` on a descriptor that is
//! no listening socket (a UDP socket through `From<OwnedFd>`) waits for readiness that
//! never comes instead of failing as std's blocking `accept` does, since no system call
//! is tried before an event; and a blocking read of an empty buffer waits, as std's does.
//!
//! `cargo test --release -p weft --features hyper --test review_s42_net`

// Tasks hand join handles out on purpose.
#![allow(clippy::async_yields_async)]

mod common;
use common::{fiber_on, join_within, thread_within};

use std::io::{self, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use weft::io::{AsyncReadExt, AsyncWriteExt};
use weft::net::{TcpListener, TcpStream, UdpSocket, UnixStream};
use weft::Runtime;

const CHILD: &str = "WEFT_REVIEW_S42_NET_CHILD";

fn rt(n: usize) -> Runtime {
    common::workers(n)
}

/// `n` bytes of a pattern that tells positions apart.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 251) as u8).collect()
}

/// Not a real test unless run as a child: runs the case named by `CHILD`.
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "cycles" => child_cycles(),
        "ctrl_c_mixed" => child_ctrl_c_mixed(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

// ---------------------------------------------------------------------------------
// 1. One stream from a task, a fiber and a plain thread; shut from a fourth
// ---------------------------------------------------------------------------------

/// A fiber blocks reading a stream, a plain thread blocks writing it (the peer reads
/// nothing, so the send buffer fills), a task waits in `peek`; then a fourth thread
/// shuts the stream down both ways. Each wait ends: the fiber reads to EOF, the writer
/// fails, the peek returns 0 (end of stream), all within a second or two.
#[test]
fn one_stream_from_three_contexts_shut_from_a_fourth() {
    common::watchdog(20, || {
        let rt = rt(2);
        let (s, c) = common::net::pair(&rt);
        let s = Arc::new(s);
        // The fiber: reads until EOF, counting.
        let r = s.clone();
        let fiber = fiber_on(&rt, move || {
            let mut n = 0usize;
            let mut buf = [0u8; 4096];
            loop {
                match (&*r).read(&mut buf) {
                    Ok(0) => return Ok(n),
                    Ok(k) => n += k,
                    Err(e) => return Err(e),
                }
            }
        });
        // The plain thread: writes until it fails.
        let w = s.clone();
        let writer = std::thread::spawn(move || {
            let chunk = vec![7u8; 65536];
            let mut total = 0usize;
            loop {
                match (&*w).write(&chunk) {
                    Ok(k) => total += k,
                    Err(e) => return (total, e.kind()),
                }
            }
        });
        // The task: a peek that waits for data (the fiber takes it first, mostly).
        let p = s.clone();
        let peeker = rt.spawn(async move {
            let mut buf = [0u8; 16];
            let mut peeks = 0usize;
            loop {
                let n = p.peek(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, io::Error>(peeks);
                }
                peeks += 1;
                weft::time::sleep(Duration::from_millis(1)).await;
            }
        });
        // Some data for the reader.
        (&c).write_all(&pattern(100_000)).unwrap();
        // Let the writer fill the buffer and block.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!writer.is_finished(), "the writer should be blocked");
        let t0 = Instant::now();
        let sh = s.clone();
        std::thread::spawn(move || sh.shutdown(Shutdown::Both).unwrap())
            .join()
            .unwrap();
        let read = join_within(fiber, 5).unwrap().unwrap();
        assert_eq!(read, 100_000, "the fiber read every byte sent, then EOF");
        let (_, kind) = thread_within(writer, 5);
        assert!(
            matches!(kind, ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
            "{kind:?}"
        );
        let peeks = join_within(peeker, 5).unwrap();
        assert!(peeks.is_ok(), "{peeks:?}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(c);
    });
}

// ---------------------------------------------------------------------------------
// 2. Ping-pong between contexts: a lost wakeup hangs a round
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Ctx {
    Task,
    Fiber,
    Thread,
}

/// A stream usable from every context.
trait Stream: Read + Write + weft::io::AsyncRead + weft::io::AsyncWrite + Unpin + Send {}
impl Stream for TcpStream {}
impl Stream for UnixStream {}

/// `rounds` one-byte echoes: the side in context `a` sends, the side in `b` echoes.
fn ping_pong<S: Stream + 'static>(rt: &Runtime, a: Ctx, b: Ctx, x: S, y: S, rounds: usize) {
    fn run_side<S: Stream + 'static>(
        rt: &Runtime,
        ctx: Ctx,
        mut s: S,
        first: bool,
        rounds: usize,
    ) -> Box<dyn FnOnce() -> usize + Send> {
        match ctx {
            Ctx::Task => {
                let h = rt.spawn(async move {
                    let mut b = [0u8; 1];
                    for i in 0..rounds {
                        if first {
                            AsyncWriteExt::write_all(&mut s, &[i as u8]).await.unwrap();
                            AsyncReadExt::read_exact(&mut s, &mut b).await.unwrap();
                        } else {
                            AsyncReadExt::read_exact(&mut s, &mut b).await.unwrap();
                            AsyncWriteExt::write_all(&mut s, &b).await.unwrap();
                        }
                        assert_eq!(b[0], i as u8);
                    }
                    rounds
                });
                Box::new(move || join_within(h, 10).unwrap())
            }
            Ctx::Fiber | Ctx::Thread => {
                let body = move || {
                    let mut b = [0u8; 1];
                    for i in 0..rounds {
                        if first {
                            Write::write_all(&mut s, &[i as u8]).unwrap();
                            Read::read_exact(&mut s, &mut b).unwrap();
                        } else {
                            Read::read_exact(&mut s, &mut b).unwrap();
                            Write::write_all(&mut s, &b).unwrap();
                        }
                        assert_eq!(b[0], i as u8);
                    }
                    rounds
                };
                if matches!(ctx, Ctx::Fiber) {
                    let h = fiber_on(rt, body);
                    Box::new(move || join_within(h, 10).unwrap())
                } else {
                    let h = std::thread::spawn(body);
                    Box::new(move || thread_within(h, 10))
                }
            }
        }
    }
    let ja = run_side(rt, a, x, true, rounds);
    let jb = run_side(rt, b, y, false, rounds);
    assert_eq!(ja(), rounds, "{a:?} -> {b:?}");
    assert_eq!(jb(), rounds, "{a:?} -> {b:?}");
}

/// Every ordered pair of contexts plays 300 one-byte round trips over TCP and over a
/// Unix stream; a readiness event lost between a `WouldBlock` and the waiter's
/// registration would hang a round (the watchdog fails it).
#[test]
fn ping_pong_between_every_pair_of_contexts() {
    common::watchdog(30, || {
        let rt = rt(2);
        let all = [Ctx::Task, Ctx::Fiber, Ctx::Thread];
        let t0 = Instant::now();
        for a in all {
            for b in all {
                let (x, y) = common::net::pair(&rt);
                ping_pong(&rt, a, b, x, y, 300);
                let (x, y) = common::on(&rt, || UnixStream::pair().unwrap());
                ping_pong(&rt, a, b, x, y, 300);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    });
}

// ---------------------------------------------------------------------------------
// 3. A runtime dropped under waiters of every kind, some on other runtimes
// ---------------------------------------------------------------------------------

/// Sockets of runtime `a`, waited on by a fiber and a task of runtime `b`, a plain
/// thread, and a task of `a` itself (accept, read with a long timeout, writable on a
/// full buffer, UDP receive, a connect in progress): dropping `a` ends every wait with
/// an error, within a second, and `b` keeps working.
#[test]
fn runtime_dropped_under_waiters_on_other_runtimes() {
    common::watchdog(20, || {
        let b = rt(1);
        let a = rt(2);
        let l = a.block_on(async { TcpListener::bind(common::loopback()).await.unwrap() });
        let (s, c) = common::net::pair(&a);
        let (w, _peer) = common::net::pair(&a);
        let u = a.block_on(async { UdpSocket::bind("127.0.0.1:0").await.unwrap() });
        // Fill w's send buffer.
        while w.try_write(&[1u8; 65536]).is_ok() {}
        let l = Arc::new(l);
        let s = Arc::new(s);
        let w = Arc::new(w);
        let u = Arc::new(u);
        // A fiber of b accepts on a's listener.
        let l2 = l.clone();
        let f_accept = fiber_on(&b, move || l2.accept_blocking().map(|_| ()));
        // A task of b waits for w to be writable.
        let w2 = w.clone();
        let t_writable = b.spawn(async move { w2.writable().await });
        // A plain thread reads s with a long timeout.
        let s2 = s.clone();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let th_read = std::thread::spawn(move || (&*s2).read(&mut [0u8; 8]));
        // A task of a receives on the UDP socket.
        let u2 = u.clone();
        let t_udp = a.spawn(async move { u2.recv_from(&mut [0u8; 8]).await.map(|_| ()) });
        std::thread::sleep(Duration::from_millis(100));
        for done in [
            f_accept.is_finished(),
            t_writable.is_finished(),
            th_read.is_finished(),
        ] {
            assert!(!done, "a wait ended early");
        }
        let t0 = Instant::now();
        drop(a);
        assert!(join_within(f_accept, 5).unwrap().is_err());
        assert!(join_within(t_writable, 5).unwrap().is_err());
        assert!(thread_within(th_read, 5).is_err());
        // The task of a was dropped with it (or ended with an error).
        if let Ok(r) = join_within(t_udp, 5) {
            assert!(r.is_err());
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        // b still works.
        let (x, y) = common::net::pair(&b);
        ping_pong(&b, Ctx::Task, Ctx::Fiber, x, y, 10);
        drop((l, s, c, w, u));
    });
}

// ---------------------------------------------------------------------------------
// 4. A thousand connect/accept/close cycles leak nothing (child process)
// ---------------------------------------------------------------------------------

/// 1,000 cycles of connect, accept, a byte each way and close, the roles spread over
/// tasks, fibers and plain threads (a third of the clients dropped before their accept,
/// a third reset, some split and reunited, some sent out with `into_std`): afterwards
/// the runtime counts the registrations it had before and the process the descriptors
/// it had.
#[test]
fn a_thousand_cycles_leak_no_descriptor_or_registration() {
    let out = common::child::run_case(CHILD, "cycles", Duration::from_secs(30));
    out.assert_finished();
}

fn child_cycles() {
    let _w = common::abort_after(25, "cycles");
    drop(rt(2));
    let fds0 = open_fds();
    {
        let rt = rt(2);
        let base = rt.stats().io_sources;
        let l =
            Arc::new(rt.block_on(async { TcpListener::bind(common::loopback()).await.unwrap() }));
        let addr = l.local_addr().unwrap();
        let t0 = Instant::now();
        for i in 0..1000usize {
            let l2 = l.clone();
            // The server side, in a task or a fiber.
            let server: Box<dyn FnOnce() -> io::Result<()> + Send> = if i % 2 == 0 {
                let h = rt.spawn(async move {
                    let (mut s, _) = l2.accept().await?;
                    let mut b = [0u8; 1];
                    let n = AsyncReadExt::read(&mut s, &mut b).await?;
                    if n == 1 {
                        AsyncWriteExt::write_all(&mut s, &b).await?;
                    }
                    if i % 5 == 0 {
                        let (r, w) = s.into_split();
                        drop(r.reunite(w).unwrap());
                    }
                    Ok(())
                });
                Box::new(move || join_within(h, 10).unwrap())
            } else {
                let h = fiber_on(&rt, move || {
                    let (s, _) = l2.accept_blocking()?;
                    let mut b = [0u8; 1];
                    let n = (&s).read(&mut b)?;
                    if n == 1 {
                        (&s).write_all(&b)?;
                    }
                    if i % 7 == 0 {
                        drop(s.into_std()?);
                    }
                    Ok(())
                });
                Box::new(move || join_within(h, 10).unwrap())
            };
            // The client side, on a plain thread.
            let client = std::thread::spawn(move || -> io::Result<()> {
                let c = TcpStream::connect_blocking(addr)?;
                match i % 3 {
                    0 => {
                        (&c).write_all(&[i as u8])?;
                        let mut b = [0u8; 1];
                        (&c).read_exact(&mut b)?;
                        assert_eq!(b[0], i as u8);
                    }
                    1 => {
                        common::net::linger_zero(c.as_raw_fd());
                    }
                    _ => {}
                }
                Ok(())
            });
            let c = thread_within(client, 10);
            let s = server();
            if i % 3 == 0 {
                c.unwrap();
                s.unwrap();
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
        common::wait_until("registrations back to the listener's", || {
            rt.stats().io_sources == base + 1
        });
        drop(l);
        assert_eq!(rt.stats().io_sources, base);
    }
    let fds1 = open_fds();
    assert_eq!(fds1, fds0, "descriptors: {fds0} before, {fds1} after");
}

// ---------------------------------------------------------------------------------
// 5. A peer reset in the middle of read_to_end
// ---------------------------------------------------------------------------------

/// The peer writes a large pattern and resets the connection: `read_to_end` ends (a
/// reset error, or end of stream), `buf` holds a prefix of the pattern and nothing
/// else, and the next read ends too.
#[test]
fn peer_reset_in_the_middle_of_read_to_end() {
    common::watchdog(20, || {
        let rt = rt(2);
        let data = Arc::new(pattern(2 << 20));
        let mut resets = 0;
        for round in 0..6 {
            let (mut w, peer) = common::net::weft_and_std(&rt);
            let d = data.clone();
            let writer = std::thread::spawn(move || {
                let mut peer = peer;
                let cut = (round + 1) * 100_000;
                let _ = peer.write_all(&d[..cut]);
                common::net::linger_zero(peer.as_raw_fd());
                drop(peer);
            });
            let (r, buf, next) = rt.block_on(async move {
                let mut buf = vec![9u8; 3];
                let r = AsyncReadExt::read_to_end(&mut w, &mut buf).await;
                let next = weft::time::timeout(
                    Duration::from_secs(2),
                    AsyncReadExt::read(&mut w, &mut [0u8; 4]),
                )
                .await;
                (r, buf, next)
            });
            writer.join().unwrap();
            assert_eq!(&buf[..3], &[9, 9, 9]);
            let got = &buf[3..];
            assert!(got.len() <= (round + 1) * 100_000);
            assert_eq!(got, &data[..got.len()], "round {round}: not a prefix");
            match &r {
                Ok(n) => assert_eq!(*n, got.len()),
                Err(e) => {
                    resets += 1;
                    assert!(
                        matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
                        "{e:?}"
                    );
                }
            }
            let next = next.expect("the read after the reset hung");
            assert!(matches!(next, Ok(0) | Err(_)), "{next:?}");
        }
        let _ = resets;
    });
}

// ---------------------------------------------------------------------------------
// 6. Peeks racing try_reads
// ---------------------------------------------------------------------------------

/// A task waits in `peek` for each byte; a plain thread takes it with `try_read` once
/// the peek saw it; only then does the peer send the next. 300 rounds: a peek never
/// misses its byte (a lost wakeup hangs it), and `try_read` takes exactly the byte.
#[test]
fn peek_racing_try_read() {
    common::watchdog(20, || {
        let rt = rt(2);
        let (s, mut peer) = common::net::weft_and_std(&rt);
        let s = Arc::new(s);
        let (seen_tx, seen_rx) = mpsc::channel::<u8>();
        let (next_tx, next_rx) = mpsc::channel::<()>();
        let (taken_tx, taken_rx) = mpsc::channel::<()>();
        let p = s.clone();
        let peeker = rt.spawn(async move {
            for i in 0..300usize {
                let mut b = [0u8; 8];
                let n = p.peek(&mut b).await.unwrap();
                assert!(n >= 1);
                assert_eq!(b[0], i as u8);
                seen_tx.send(b[0]).unwrap();
                // Wait until the thread has taken it.
                while next_rx.try_recv().is_err() {
                    weft::time::sleep(Duration::from_micros(100)).await;
                }
            }
        });
        let taker = {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..300usize {
                    let b = seen_rx.recv_timeout(Duration::from_secs(5)).unwrap();
                    assert_eq!(b, i as u8);
                    let mut buf = [0u8; 8];
                    let n = s.try_read(&mut buf).unwrap();
                    assert_eq!(n, 1, "round {i}");
                    assert_eq!(buf[0], i as u8);
                    // Nothing more is there.
                    assert_eq!(
                        s.try_read(&mut buf).unwrap_err().kind(),
                        ErrorKind::WouldBlock
                    );
                    next_tx.send(()).unwrap();
                    taken_tx.send(()).unwrap();
                }
            })
        };
        for i in 0..300usize {
            peer.write_all(&[i as u8]).unwrap();
            taken_rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("hang: round {i}'s byte was never peeked"));
        }
        thread_within(taker, 10);
        join_within(peeker, 10).unwrap();
    });
}

// ---------------------------------------------------------------------------------
// 7. Nested blocking reads on the only worker
// ---------------------------------------------------------------------------------

/// On a runtime of one worker, task A blocks reading stream S (std's `Read`: the
/// worker helps), then task B blocks reading stream T, whose byte A sends only once it
/// has read S's. A plain thread then writes S. A must get its byte although B's wait
/// began after A's on the same worker, and then B gets T's.
#[test]
fn nested_blocking_reads_on_the_only_worker() {
    common::watchdog(20, || {
        for _ in 0..5 {
            let rt = rt(1);
            let (s1, s2) = common::net::pair(&rt);
            let (t1, t2) = common::net::pair(&rt);
            let a_blocked = Arc::new(AtomicBool::new(false));
            let ab = a_blocked.clone();
            let a = rt.spawn(async move {
                ab.store(true, SeqCst);
                let mut b = [0u8; 1];
                (&s1).read_exact(&mut b).unwrap();
                (&t2).write_all(&b).unwrap();
                b[0]
            });
            assert!(common::wait_flag(&a_blocked, Duration::from_secs(5)));
            let b_started = Arc::new(AtomicBool::new(false));
            let bs = b_started.clone();
            let b = rt.spawn(async move {
                bs.store(true, SeqCst);
                let mut b = [0u8; 1];
                (&t1).read_exact(&mut b).unwrap();
                b[0]
            });
            assert!(common::wait_flag(&b_started, Duration::from_secs(5)));
            std::thread::sleep(Duration::from_millis(20));
            (&s2).write_all(&[42]).unwrap();
            assert_eq!(join_within(a, 5).unwrap(), 42);
            assert_eq!(join_within(b, 5).unwrap(), 42);
        }
    });
}

// ---------------------------------------------------------------------------------
// 8. Read and write timeouts: zero, tiny, from every context
// ---------------------------------------------------------------------------------

/// A zero timeout is an error; a 1 ns (and a 1 µs) read timeout ends a read with
/// `WouldBlock` at once on a plain thread, a fiber and a worker (inside a task); the
/// stream then still reads data that comes later (the timed-out wait left nothing
/// behind), and a tiny write timeout ends a write on a full buffer.
#[test]
fn tiny_timeouts_from_every_context() {
    common::watchdog(20, || {
        let rt = rt(2);
        for tiny in [Duration::from_nanos(1), Duration::from_micros(1)] {
            for ctx in [Ctx::Thread, Ctx::Fiber, Ctx::Task] {
                let (s, peer) = common::net::pair(&rt);
                assert_eq!(
                    s.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
                    ErrorKind::InvalidInput
                );
                assert_eq!(
                    s.set_write_timeout(Some(Duration::ZERO))
                        .unwrap_err()
                        .kind(),
                    ErrorKind::InvalidInput
                );
                s.set_read_timeout(Some(tiny)).unwrap();
                s.set_write_timeout(Some(tiny)).unwrap();
                assert_eq!(s.read_timeout().unwrap(), Some(tiny));
                let s = Arc::new(s);
                let peer = Arc::new(peer);
                let body = {
                    let s = s.clone();
                    let peer = peer.clone();
                    move || {
                        let t0 = Instant::now();
                        let e = (&*s).read(&mut [0u8; 4]).unwrap_err();
                        assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e:?}");
                        let took = t0.elapsed();
                        (&*peer).write_all(b"late").unwrap();
                        let mut got = Vec::new();
                        let deadline = Instant::now() + Duration::from_secs(3);
                        while got.len() < 4 && Instant::now() < deadline {
                            let mut b = [0u8; 4];
                            match (&*s).read(&mut b) {
                                Ok(n) => got.extend_from_slice(&b[..n]),
                                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                        assert_eq!(got, b"late");
                        // A write on a full buffer times out.
                        let chunk = vec![0u8; 1 << 16];
                        let t1 = Instant::now();
                        let e = loop {
                            match (&*s).write(&chunk) {
                                Ok(n) => assert!(n > 0 && t1.elapsed() < Duration::from_secs(3)),
                                Err(e) => break e,
                            }
                        };
                        assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e:?}");
                        took
                    }
                };
                let took = match ctx {
                    Ctx::Thread => thread_within(std::thread::spawn(body), 10),
                    Ctx::Fiber => join_within(fiber_on(&rt, body), 10).unwrap(),
                    Ctx::Task => join_within(rt.spawn(async move { body() }), 10).unwrap(),
                };
                assert!(
                    took < Duration::from_millis(200),
                    "{ctx:?} {tiny:?}: {took:?}"
                );
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// 9. from_std of blocking std sockets that are already ready
// ---------------------------------------------------------------------------------

/// A blocking std listener with three connections queued, taken in with `from_std`:
/// a plain thread's `accept_blocking` gets all three at once (the registration's edge),
/// then a task's `accept` gets a fourth. A blocking std stream whose peer already
/// wrote and closed, taken in: `read_to_end` gets everything.
#[test]
fn from_std_of_blocking_sockets_already_ready() {
    common::watchdog(20, || {
        let rt = rt(2);
        let std_l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let addr = std_l.local_addr().unwrap();
        let clients: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let l = common::on(&rt, || TcpListener::from_std(std_l).unwrap());
        let l = Arc::new(l);
        let l2 = l.clone();
        let t0 = Instant::now();
        let accepted = thread_within(
            std::thread::spawn(move || {
                (0..3)
                    .map(|_| l2.accept_blocking().unwrap().1)
                    .collect::<Vec<_>>()
            }),
            5,
        );
        assert_eq!(accepted.len(), 3);
        assert!(t0.elapsed() < Duration::from_secs(1));
        let c4 = std::net::TcpStream::connect(addr).unwrap();
        let l3 = l.clone();
        join_within(rt.spawn(async move { l3.accept().await.unwrap() }), 5).unwrap();
        drop((clients, c4));
        // A stream with its data and FIN already in.
        let std_l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let mut c = std::net::TcpStream::connect(std_l.local_addr().unwrap()).unwrap();
        let (srv, _) = std_l.accept().unwrap();
        let data = pattern(300_000);
        let d = data.clone();
        let w = std::thread::spawn(move || {
            c.write_all(&d).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            c
        });
        std::thread::sleep(Duration::from_millis(50));
        let mut s = common::on(&rt, || TcpStream::from_std(srv).unwrap());
        let got = rt.block_on(async move {
            let mut buf = Vec::new();
            AsyncReadExt::read_to_end(&mut s, &mut buf).await.unwrap();
            buf
        });
        assert_eq!(got, data);
        drop(thread_within(w, 5));
    });
}

// ---------------------------------------------------------------------------------
// 10. One UDP socket, receivers in every context
// ---------------------------------------------------------------------------------

/// Two tasks, two fibers and two plain threads receive on one UDP socket while a peer
/// sends 600 numbered datagrams (paced so the socket's buffer never overflows), then
/// one "stop" per receiver: every datagram arrives exactly once and every receiver
/// ends (a lost wakeup leaves one waiting, and its stop goes to another).
#[test]
fn udp_receivers_in_every_context_share_every_datagram() {
    common::watchdog(20, || {
        let rt = rt(2);
        let recv = Arc::new(rt.block_on(async { UdpSocket::bind("127.0.0.1:0").await.unwrap() }));
        let to = recv.local_addr().unwrap();
        let got = Arc::new(std::sync::Mutex::new(Vec::<u32>::new()));
        let count = Arc::new(AtomicUsize::new(0));
        let mut joins: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
        let handle = |d: &[u8], got: &std::sync::Mutex<Vec<u32>>, count: &AtomicUsize| -> bool {
            if d == b"stop" {
                return false;
            }
            got.lock()
                .unwrap()
                .push(u32::from_le_bytes(d.try_into().unwrap()));
            count.fetch_add(1, SeqCst);
            true
        };
        for k in 0..6 {
            let (recv, got, count) = (recv.clone(), got.clone(), count.clone());
            match k % 3 {
                0 => {
                    let h = rt.spawn(async move {
                        let mut b = [0u8; 16];
                        loop {
                            let (n, _) = recv.recv_from(&mut b).await.unwrap();
                            if !handle(&b[..n], &got, &count) {
                                return;
                            }
                        }
                    });
                    joins.push(Box::new(move || join_within(h, 10).unwrap()));
                }
                _ => {
                    let body = move || {
                        let mut b = [0u8; 16];
                        loop {
                            let (n, _) = recv.recv_from_blocking(&mut b).unwrap();
                            if !handle(&b[..n], &got, &count) {
                                return;
                            }
                        }
                    };
                    if k % 3 == 1 {
                        let h = fiber_on(&rt, body);
                        joins.push(Box::new(move || join_within(h, 10).unwrap()));
                    } else {
                        let h = std::thread::spawn(body);
                        joins.push(Box::new(move || thread_within(h, 10)));
                    }
                }
            }
        }
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..600u32 {
            sender.send_to(&i.to_le_bytes(), to).unwrap();
            if i % 20 == 19 {
                let deadline = Instant::now() + Duration::from_secs(5);
                while count.load(SeqCst) + 10 < i as usize {
                    assert!(
                        Instant::now() < deadline,
                        "hang: {} of {i} received",
                        count.load(SeqCst)
                    );
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        common::wait_until("all 600 received", || count.load(SeqCst) == 600);
        for _ in 0..6 {
            sender.send_to(b"stop", to).unwrap();
        }
        for j in joins {
            j();
        }
        let mut all = got.lock().unwrap().clone();
        all.sort_unstable();
        assert_eq!(all, (0..600).collect::<Vec<_>>());
    });
}

// ---------------------------------------------------------------------------------
// 11. hyper: connections cut mid-request and mid-response
// ---------------------------------------------------------------------------------

#[cfg(feature = "hyper")]
mod hyper_cases {
    use super::*;
    use http_body_util::{BodyExt, Empty, Full};
    use hyper::body::{Body, Bytes, Frame};
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use weft::hyper::{WeftIo, WeftTimer};

    /// A plain server: reads a request head, answers with `answer`, then resets (or
    /// closes) the connection.
    fn raw_server(
        answer: &'static [u8],
        reset: bool,
    ) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
        let l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut b).unwrap();
                if n == 0 {
                    return;
                }
                head.extend_from_slice(&b[..n]);
            }
            let _ = s.write_all(answer);
            std::thread::sleep(Duration::from_millis(20));
            if reset {
                common::net::linger_zero(s.as_raw_fd());
            }
            drop(s);
        });
        (addr, h)
    }

    /// A hyper client over `WeftIo` whose server cuts the connection: before any
    /// answer, in the middle of a body (reset, and closed), after a whole answer. Each
    /// request ends (an error where the answer was cut), the connection task ends, and
    /// the runtime's registrations go back to where they were.
    #[test]
    fn hyper_client_connection_cut_mid_response() {
        common::watchdog(20, || {
            let rt = rt(2);
            let base = rt.stats().io_sources;
            let cases: [(&'static [u8], bool, bool); 5] = [
                (b"", true, false),
                (b"", false, false),
                (
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc",
                    true,
                    false,
                ),
                (
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc",
                    false,
                    false,
                ),
                (
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
                    false,
                    true,
                ),
            ];
            for (answer, reset, ok) in cases {
                let (addr, server) = raw_server(answer, reset);
                let r = rt.block_on(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    let (mut sender, conn) =
                        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(WeftIo::new(
                            stream,
                        ))
                        .await
                        .unwrap();
                    let conn = weft::spawn(conn);
                    let req = hyper::Request::builder()
                        .uri("/")
                        .header("host", "x")
                        .body(Empty::new())
                        .unwrap();
                    let r = weft::time::timeout(Duration::from_secs(5), async {
                        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
                        let body = resp
                            .into_body()
                            .collect()
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok::<_, String>(body.to_bytes())
                    })
                    .await
                    .expect("hang: the request did not end");
                    drop(sender);
                    let c = weft::time::timeout(Duration::from_secs(5), conn)
                        .await
                        .expect("hang: the connection task did not end");
                    assert!(c.is_ok());
                    r
                });
                server.join().unwrap();
                if ok {
                    assert_eq!(r.unwrap(), Bytes::from_static(b"abc"));
                } else {
                    assert!(r.is_err(), "{answer:?} reset={reset}: {r:?}");
                }
            }
            common::wait_until("registrations released", || rt.stats().io_sources == base);
        });
    }

    /// A body of `chunks` pieces of 16 KiB, one per 2 ms (on weft's timer).
    struct SlowBody {
        left: usize,
        sleep: Option<Pin<Box<weft::time::Sleep>>>,
        dropped: Arc<AtomicBool>,
    }

    impl Drop for SlowBody {
        fn drop(&mut self) {
            self.dropped.store(true, SeqCst);
        }
    }

    impl Body for SlowBody {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(weft::time::sleep(Duration::from_millis(2))));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
            self.left -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; 16 << 10])))))
        }
    }

    /// A hyper server over `WeftIo`: a client that sends a head and part of a body and
    /// then closes (or resets); a client that reads part of a slow streamed answer and
    /// then resets. Each `serve_connection` ends, the answer's body is dropped, and the
    /// registrations go back.
    #[test]
    fn hyper_server_connection_cut_mid_request_and_mid_response() {
        common::watchdog(20, || {
            let rt = rt(2);
            let base = rt.stats().io_sources;
            for case in 0..4 {
                let l = rt.block_on(async { TcpListener::bind(common::loopback()).await.unwrap() });
                let addr = l.local_addr().unwrap();
                let dropped = Arc::new(AtomicBool::new(false));
                let d = dropped.clone();
                let server = rt.spawn(async move {
                    let (s, _) = l.accept().await.unwrap();
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let d = d.clone();
                            async move {
                                if req.uri().path() == "/upload" {
                                    // Read the whole body: the client cuts it.
                                    let r = req.into_body().collect().await;
                                    assert!(r.is_err());
                                    d.store(true, SeqCst);
                                    Ok::<_, Infallible>(hyper::Response::new(
                                        http_body_util::Either::Left(Full::new(Bytes::from("x"))),
                                    ))
                                } else {
                                    Ok(hyper::Response::new(http_body_util::Either::Right(
                                        SlowBody {
                                            left: 1000,
                                            sleep: None,
                                            dropped: d,
                                        },
                                    )))
                                }
                            }
                        },
                    );
                    hyper::server::conn::http1::Builder::new()
                        .timer(WeftTimer::new())
                        .serve_connection(WeftIo::new(s), service)
                        .await
                });
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                if case < 2 {
                    c.write_all(
                        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
                    )
                    .unwrap();
                    c.write_all(&[b'y'; 5000]).unwrap();
                    std::thread::sleep(Duration::from_millis(30));
                    if case == 1 {
                        common::net::linger_zero(c.as_raw_fd());
                    } else {
                        c.shutdown(Shutdown::Write).unwrap();
                    }
                } else {
                    c.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                        .unwrap();
                    let mut got = 0;
                    let mut b = [0u8; 8192];
                    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    while got < 100_000 {
                        let n = c.read(&mut b).unwrap();
                        assert!(n > 0);
                        got += n;
                    }
                    if case == 3 {
                        common::net::linger_zero(c.as_raw_fd());
                    } else {
                        c.shutdown(Shutdown::Both).unwrap();
                    }
                }
                drop(c);
                let t0 = Instant::now();
                let r = join_within(server, 10).unwrap();
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "case {case}: {:?}",
                    t0.elapsed()
                );
                if case >= 2 {
                    assert!(r.is_err(), "case {case}: {r:?}");
                }
                assert!(
                    dropped.load(SeqCst),
                    "case {case}: the body was not dropped"
                );
            }
            common::wait_until("registrations released", || rt.stats().io_sources == base);
        });
    }

    /// A sleep hyper can downcast to none of weft's.
    struct Foreign(Pin<Box<weft::time::Sleep>>);
    impl std::future::Future for Foreign {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.as_mut().poll(cx)
        }
    }
    impl hyper::rt::Sleep for Foreign {}

    /// `WeftTimer`'s sleeps: a long one polled, reset earlier, completes at the new
    /// deadline; one that completed, reset later, waits again; a reset into the past
    /// completes at the next poll; a foreign sleep reset becomes a weft one at the new
    /// deadline; a thousand polled, half reset, all dropped, leave no timer behind; a
    /// sleep made on a plain thread binds where it is polled; one whose runtime went
    /// ends at its (reset) deadline on a plain thread.
    #[test]
    fn weft_timer_sleeps_reset_and_dropped() {
        use hyper::rt::Timer;
        common::watchdog(20, || {
            let rt = rt(2);
            let timer = WeftTimer::new();
            let h = rt.spawn(async move {
                let poll1 = |s: &mut Pin<Box<dyn hyper::rt::Sleep>>| {
                    common::poll_once(s.as_mut(), std::task::Waker::noop()).is_ready()
                };
                let stats = || weft::Handle::current().stats();
                let p0 = stats().timers_pending;
                // Long, polled, reset earlier.
                let mut s = timer.sleep(Duration::from_secs(60));
                assert!(!poll1(&mut s));
                let t0 = Instant::now();
                timer.reset(&mut s, Instant::now() + Duration::from_millis(10));
                (&mut s).await;
                let took = t0.elapsed();
                assert!(
                    took >= Duration::from_millis(10) && took < Duration::from_millis(500),
                    "{took:?}"
                );
                // Done, reset later: pending again, then done.
                timer.reset(&mut s, Instant::now() + Duration::from_millis(10));
                assert!(!poll1(&mut s));
                (&mut s).await;
                // Into the past: ready at once.
                timer.reset(&mut s, Instant::now() - Duration::from_millis(1));
                assert!(poll1(&mut s));
                // A foreign sleep.
                let mut f: Pin<Box<dyn hyper::rt::Sleep>> = Box::pin(Foreign(Box::pin(
                    weft::time::sleep(Duration::from_secs(60)),
                )));
                assert!(!poll1(&mut f));
                let t0 = Instant::now();
                timer.reset(&mut f, Instant::now() + Duration::from_millis(5));
                (&mut f).await;
                assert!(t0.elapsed() < Duration::from_millis(500));
                drop((s, f));
                // Many.
                let mut many: Vec<_> = (0..1000)
                    .map(|i| timer.sleep(Duration::from_millis(1000 + i)))
                    .collect();
                for s in &mut many {
                    assert!(!poll1(s));
                }
                for (i, s) in many.iter_mut().enumerate() {
                    if i % 2 == 0 {
                        timer.reset(s, Instant::now() + Duration::from_secs(30));
                        assert!(!poll1(s));
                    }
                }
                assert!(stats().timers_pending >= p0 + 1000);
                drop(many);
                assert_eq!(stats().timers_pending, p0);
            });
            join_within(h, 10).unwrap();
            // Made on a plain thread (no runtime), polled in a task.
            let mut s = timer.sleep(Duration::from_millis(10));
            let h = rt.spawn(async move {
                let t0 = Instant::now();
                (&mut s).await;
                t0.elapsed()
            });
            assert!(join_within(h, 5).unwrap() < Duration::from_millis(500));
            // A sleep of a runtime that goes, polled on a plain thread after.
            let other = super::rt(1);
            let mut s = other.block_on(async move {
                let mut s = timer.sleep(Duration::from_secs(60));
                let _ = common::poll_once(s.as_mut(), std::task::Waker::noop());
                s
            });
            drop(other);
            timer.reset(&mut s, Instant::now() + Duration::from_millis(20));
            let t0 = Instant::now();
            weft::wait(s);
            let took = t0.elapsed();
            assert!(took < Duration::from_secs(1), "{took:?}");
        });
    }
}

// ---------------------------------------------------------------------------------
// 12. ctrl_c beside socket waits (child process: raises SIGINT)
// ---------------------------------------------------------------------------------

/// A task waits for Ctrl-C or a socket's byte, whichever first, a fiber in
/// `ctrl_c_blocking`, a plain thread too: SIGINT completes the three Ctrl-C waits and
/// leaves the socket's wait alone (its byte comes after and is read).
#[test]
fn ctrl_c_beside_socket_waits() {
    let out = common::child::run_case(CHILD, "ctrl_c_mixed", Duration::from_secs(20));
    out.assert_finished();
}

fn child_ctrl_c_mixed() {
    let _w = common::abort_after(15, "ctrl_c_mixed");
    common::signal::install_handler();
    let rt = rt(2);
    let (s, peer) = common::net::pair(&rt);
    let polled = Arc::new(AtomicUsize::new(0));
    let p = polled.clone();
    let task = rt.spawn(async move {
        let mut s = s;
        let mut cc = std::pin::pin!(weft::signal::ctrl_c());
        let mut first = true;
        // Poll both by hand; Ctrl-C first.
        let r = std::future::poll_fn(|cx| {
            use std::future::Future;
            if first {
                first = false;
                p.fetch_add(1, SeqCst);
            }
            if let std::task::Poll::Ready(r) = cc.as_mut().poll(cx) {
                return std::task::Poll::Ready(r);
            }
            std::task::Poll::Pending
        })
        .await;
        r.unwrap();
        let mut b = [0u8; 1];
        AsyncReadExt::read_exact(&mut s, &mut b).await.unwrap();
        b[0]
    });
    let p = polled.clone();
    let fiber = fiber_on(&rt, move || {
        p.fetch_add(1, SeqCst);
        weft::signal::ctrl_c_blocking()
    });
    let p = polled.clone();
    let thread = std::thread::spawn(move || {
        p.fetch_add(1, SeqCst);
        weft::signal::ctrl_c_blocking()
    });
    common::wait_until("the three waits began", || polled.load(SeqCst) == 3);
    std::thread::sleep(Duration::from_millis(50));
    common::signal::raise_until("the Ctrl-C waits", || {
        fiber.is_finished() && thread.is_finished()
    });
    join_within(fiber, 5).unwrap().unwrap();
    thread_within(thread, 5).unwrap();
    (&peer).write_all(&[5]).unwrap();
    assert_eq!(join_within(task, 5).unwrap(), 5);
}

// ---------------------------------------------------------------------------------
// 13. Graceful shutdown lets socket work in progress finish
// ---------------------------------------------------------------------------------

/// A server task in the middle of a request when `shutdown_graceful` begins: it reads
/// the rest (sent 50 ms later), resolves a name, connects to a second server and
/// answers. All of it finishes within the grace period (the task counts as finished),
/// and the client gets the answer; a task left waiting on a socket at the deadline is
/// cancelled.
#[test]
fn graceful_shutdown_lets_socket_work_finish() {
    common::watchdog(20, || {
        let rt = rt(2);
        let backend = std::net::TcpListener::bind(common::loopback()).unwrap();
        let baddr = backend.local_addr().unwrap();
        let back = std::thread::spawn(move || {
            let (mut s, _) = backend.accept().unwrap();
            s.write_all(b"B").unwrap();
        });
        let (mut srv, mut client) = common::net::weft_and_std(&rt);
        let (_idle, _idle_peer) = common::net::weft_and_std(&rt);
        let started = Arc::new(AtomicBool::new(false));
        let st = started.clone();
        let h = rt.spawn(async move {
            st.store(true, SeqCst);
            let mut req = [0u8; 4];
            AsyncReadExt::read_exact(&mut srv, &mut req).await?;
            let addrs: Vec<_> = weft::net::lookup_host(baddr).await?.collect();
            let mut b = TcpStream::connect(&addrs[..]).await?;
            let mut one = [0u8; 1];
            AsyncReadExt::read_exact(&mut b, &mut one).await?;
            AsyncWriteExt::write_all(&mut srv, &req).await?;
            AsyncWriteExt::write_all(&mut srv, &one).await?;
            Ok::<_, io::Error>(())
        });
        let stuck = rt.spawn(async move {
            let mut idle = _idle;
            AsyncReadExt::read(&mut idle, &mut [0u8; 1]).await
        });
        assert!(common::wait_flag(&started, Duration::from_secs(5)));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            client.write_all(b"ping").unwrap();
            let mut answer = [0u8; 5];
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            client.read_exact(&mut answer).map(|()| answer)
        });
        let t0 = Instant::now();
        let report = rt.shutdown_graceful(Duration::from_millis(800));
        let took = t0.elapsed();
        let answer = thread_within(sender, 5);
        back.join().unwrap();
        assert_eq!(&answer.unwrap(), b"pingB");
        let r = join_within(h, 5).unwrap();
        assert!(r.is_ok(), "{r:?}");
        assert!(join_within(stuck, 5).is_err());
        assert_eq!((report.finished, report.cancelled), (1, 1), "{report}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    });
}

// ---------------------------------------------------------------------------------
// 14. Socket waits while the runtime's only worker is stuck in a long poll
// ---------------------------------------------------------------------------------

/// The only worker of a runtime spins in one poll for 1.5 s. Meanwhile a plain thread
/// reads one of the runtime's sockets with a 50 ms timeout, and another reads a socket
/// whose byte comes 50 ms in: both hear in far less than the 1.5 s (the monitor
/// rescues the drivers nobody holds).
#[test]
fn socket_waits_while_the_only_worker_is_stuck() {
    common::watchdog(20, || {
        let rt = common::no_interactive_runtime(1);
        let (a, _a_peer) = common::net::pair(&rt);
        let (b, b_peer) = common::net::pair(&rt);
        a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let spinning = Arc::new(AtomicBool::new(false));
        let sp = spinning.clone();
        let spin = rt.spawn(async move {
            sp.store(true, SeqCst);
            common::spin_for(Duration::from_millis(1500));
        });
        assert!(common::wait_flag(&spinning, Duration::from_secs(5)));
        let t0 = Instant::now();
        let timed = std::thread::spawn(move || {
            let r = (&a).read(&mut [0u8; 1]);
            (r.map_err(|e| e.kind()), t0.elapsed())
        });
        let data = std::thread::spawn(move || {
            let mut x = [0u8; 1];
            let r = (&b).read(&mut x);
            (r.map_err(|e| e.kind()), t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        (&b_peer).write_all(&[1]).unwrap();
        let (r1, t1) = thread_within(timed, 5);
        let (r2, t2) = thread_within(data, 5);
        join_within(spin, 5).unwrap();
        assert_eq!(r1, Err(ErrorKind::WouldBlock));
        assert_eq!(r2, Ok(1));
        assert!(
            t1 < Duration::from_millis(700),
            "timeout heard after {t1:?}"
        );
        assert!(t2 < Duration::from_millis(700), "data heard after {t2:?}");
    });
}

// ---------------------------------------------------------------------------------
// 15. Blocking reads inside a fork-join `join` on the only worker
// ---------------------------------------------------------------------------------

/// On a runtime of one worker, a task runs `weft::join(a, b)`: `a` blocks reading S and
/// then writes T's byte; `b` blocks reading T. A plain thread writes S. Whichever of
/// the two blocks first, both must end (a wait inside a join cannot be set aside, so it
/// dispatches; the other must still be resumed).
#[test]
fn blocking_reads_inside_join_on_the_only_worker() {
    common::watchdog(20, || {
        for round in 0..5 {
            let rt = rt(1);
            let (s1, s2) = common::net::pair(&rt);
            let (t1, t2) = common::net::pair(&rt);
            let h = rt.spawn(async move {
                weft::join(
                    move || {
                        let mut b = [0u8; 1];
                        (&s1).read_exact(&mut b).unwrap();
                        (&t2).write_all(&b).unwrap();
                        b[0]
                    },
                    move || {
                        let mut b = [0u8; 1];
                        (&t1).read_exact(&mut b).unwrap();
                        b[0]
                    },
                )
            });
            std::thread::sleep(Duration::from_millis(30));
            (&s2).write_all(&[round]).unwrap();
            assert_eq!(join_within(h, 5).unwrap(), (round, round));
        }
    });
}

// ---------------------------------------------------------------------------------
// 16. More ready sockets than one epoll batch holds
// ---------------------------------------------------------------------------------

/// 1,500 UDP sockets, each with a task waiting to receive (more than the 1,024 events
/// one `epoll_wait` drains), plus a plain thread and a fiber waiting on two more: one
/// datagram to each wakes every waiter, and every registration goes when they drop.
#[test]
fn more_ready_sockets_than_one_epoll_batch() {
    common::watchdog(20, || {
        let rt = rt(2);
        let base = rt.stats().io_sources;
        const N: usize = 1500;
        let socks: Vec<Arc<UdpSocket>> = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..N + 2 {
                v.push(Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap()));
            }
            v
        });
        let addrs: Vec<_> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
        let done = Arc::new(AtomicUsize::new(0));
        let polled = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for s in socks.iter().take(N) {
            let (s, done, polled) = (s.clone(), done.clone(), polled.clone());
            tasks.push(rt.spawn(async move {
                let mut f = std::pin::pin!(async {
                    let mut b = [0u8; 8];
                    s.recv_from(&mut b).await.unwrap();
                });
                std::future::poll_fn(|cx| {
                    let r = std::future::Future::poll(f.as_mut(), cx);
                    if r.is_pending() {
                        polled.fetch_add(1, SeqCst);
                    }
                    r
                })
                .await;
                done.fetch_add(1, SeqCst);
            }));
        }
        let st = socks[N].clone();
        let th = std::thread::spawn(move || st.recv_from_blocking(&mut [0u8; 8]).map(|r| r.0));
        let sf = socks[N + 1].clone();
        let fib = fiber_on(&rt, move || {
            sf.recv_from_blocking(&mut [0u8; 8]).map(|r| r.0)
        });
        common::wait_until("every task waits", || polled.load(SeqCst) >= N);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(done.load(SeqCst), 0);
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let t0 = Instant::now();
        for a in &addrs {
            sender.send_to(b"x", a).unwrap();
        }
        for t in tasks {
            join_within(t, 10).unwrap();
        }
        assert_eq!(thread_within(th, 5).unwrap(), 1);
        assert_eq!(join_within(fib, 5).unwrap().unwrap(), 1);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(socks);
        assert_eq!(rt.stats().io_sources, base);
    });
}

// ---------------------------------------------------------------------------------
// 17. from_std of descriptors that are no sockets, or the wrong sockets
// ---------------------------------------------------------------------------------

/// A regular file's descriptor dressed as a std `TcpStream` (safe: `From<OwnedFd>`):
/// `from_std` fails (epoll refuses a regular file) and leaves no registration, no slot
/// and no descriptor behind; a pipe dressed as a stream registers and its reads fail
/// or succeed without hanging.
#[test]
fn from_std_of_descriptors_that_are_not_what_they_claim() {
    use std::os::fd::OwnedFd;
    common::watchdog(20, || {
        let rt = rt(2);
        let base = rt.stats().io_sources;
        let dir = common::net::TempDir::new("s42-fromstd");
        let path = dir.path("f");
        std::fs::write(&path, b"hello").unwrap();
        for _ in 0..100 {
            let f = std::fs::File::open(&path).unwrap();
            let s = std::net::TcpStream::from(OwnedFd::from(f));
            let r = common::on(&rt, || TcpStream::from_std(s));
            assert!(r.is_err());
        }
        assert_eq!(rt.stats().io_sources, base);
        // A pipe dressed as a stream: it registers; a read fails (not a socket)
        // rather than waiting for ever, once the pipe has data.
        let (r, mut w) = std::io::pipe().unwrap();
        w.write_all(b"x").unwrap();
        let s = std::net::TcpStream::from(OwnedFd::from(r));
        let mut s = common::on(&rt, || TcpStream::from_std(s).unwrap());
        let got = rt.block_on(async move {
            let r = weft::time::timeout(
                Duration::from_secs(2),
                AsyncReadExt::read(&mut s, &mut [0u8; 4]),
            )
            .await;
            drop(s);
            r
        });
        assert!(got
            .expect("hang: a read of a pipe dressed as a stream")
            .is_err());
        drop(w);
        assert_eq!(rt.stats().io_sources, base);
    });
}

// ---------------------------------------------------------------------------------
// 18. Timed reads on an idle runtime's sockets from elsewhere
// ---------------------------------------------------------------------------------

/// The sockets of an idle runtime A, read with a 30 ms timeout by a fiber of runtime B
/// and by a plain thread, twenty times each: every read times out after 30 ms and well
/// before 300 ms (the timer goes on A's wheel, whose holder sleeps in `epoll_wait`).
#[test]
fn timed_reads_on_an_idle_runtimes_sockets_from_elsewhere() {
    common::watchdog(20, || {
        let a = rt(2);
        let b = rt(1);
        let (s, _peer) = common::net::pair(&a);
        s.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        let s = Arc::new(s);
        let body = {
            let s = s.clone();
            move || {
                let mut worst = Duration::ZERO;
                for _ in 0..10 {
                    std::thread::sleep(Duration::from_millis(5));
                    let t0 = Instant::now();
                    let e = (&*s).read(&mut [0u8; 1]).unwrap_err();
                    assert_eq!(e.kind(), ErrorKind::WouldBlock);
                    let took = t0.elapsed();
                    assert!(took >= Duration::from_millis(29), "{took:?}");
                    worst = worst.max(took);
                }
                worst
            }
        };
        let f = fiber_on(&b, body.clone());
        let worst_f = join_within(f, 10).unwrap();
        let worst_t = thread_within(std::thread::spawn(body), 10);
        assert!(worst_f < Duration::from_millis(300), "fiber: {worst_f:?}");
        assert!(worst_t < Duration::from_millis(300), "thread: {worst_t:?}");
    });
}
