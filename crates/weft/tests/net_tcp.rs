//! TCP (issue 17): echo servers with 1,000 connections from tasks and from fibers,
//! half-close, a peer's reset, readers woken by a shutdown from elsewhere, accept under
//! a connection flood while the listener or the runtime goes, read and write timeouts,
//! readers woken by the runtime's drop, an idle server that makes no wake-ups, the
//! readiness API, split halves, std conversions and socket options, and which runtime
//! a socket made on a plain thread registers with.
//!
//! Every test body runs under a watchdog ([`watchdog`]), and every socket is made
//! where a runtime of the test's own is current (inside its `block_on`, a task or a
//! fiber): tests run in parallel, and a socket made on a plain thread would register
//! with whichever runtime of the binary started last. The one test about that rule
//! runs in a child process of its own.
//!
//! And every listener binds a loopback address of its own ([`loopback`]), not
//! `127.0.0.1`: the flooding tests go on connecting to their listener's port after
//! they drop it, and the kernel may give that port to the next listener that binds
//! port 0; a stray connect accepted by a 1,000-client echo server would take the
//! place of one of its clients.

mod common;
use common::net::linger_zero;

use common::{loopback, queue_burst};

use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};
use weft::Runtime;

/// Runs `f` on a thread of its own; panics with "hang" if it has not finished after
/// `secs` seconds, re-raises its panic otherwise.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let body = std::thread::Builder::new()
        .name("net-test-body".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            body.join().unwrap();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: the test body did not finish within {secs} s")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match body.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the body neither returned nor panicked"),
        },
    }
}

/// A runtime with `n` workers (and the default interactive one).
fn runtime(n: usize) -> Runtime {
    weft::Builder::new().worker_threads(n).build().unwrap()
}

/// `f` with `rt` current (inside its `block_on`), so sockets and fibers made there
/// belong to it.
fn on<R>(rt: &Runtime, f: impl FnOnce() -> R) -> R {
    rt.block_on(async move { f() })
}

/// A listener and a connection to it, both of `rt`: (listener, client, server side).
fn pair(rt: &Runtime) -> (TcpListener, TcpStream, TcpStream) {
    rt.block_on(async {
        let l = TcpListener::bind(loopback()).await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, peer) = l.accept().await.unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
        (l, c, s)
    })
}

/// How many connections a test of `want` may open: each takes two descriptors (client
/// and server side). Raises the soft limit to the hard one if it is too low, and
/// scales down (saying so) if even that is not enough.
fn connections(want: usize) -> usize {
    // Two tests of this size may run at once, beside the others' few sockets.
    let needed = (4 * want + 256) as libc::rlim_t;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < needed {
            let raised = libc::rlimit {
                rlim_cur: needed.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    let fit = (lim.rlim_cur.saturating_sub(256) / 4) as usize;
    if fit < want {
        println!(
            "note: RLIMIT_NOFILE is {} (hard {}): {fit} connections instead of {want}",
            lim.rlim_cur, lim.rlim_max
        );
    }
    want.min(fit).max(1)
}

/// Round trips per connection in the echo tests.
const ROUNDS: usize = 4;

/// Client `i`'s message of round `r`: its own length (1..=3000) and bytes, so a
/// reply that went to the wrong connection or came back in the wrong order shows.
fn message(i: usize, r: usize) -> Vec<u8> {
    let len = 1 + (i * 131 + r * 977) % 3000;
    (0..len)
        .map(|k| (i.wrapping_mul(31) ^ (r * 7 + k)) as u8)
        .collect()
}

fn total_bytes(n: usize) -> usize {
    (0..n)
        .flat_map(|i| (0..ROUNDS).map(move |r| message(i, r).len()))
        .sum()
}

// ---------------------------------------------------------------- echo ----

/// 1,000 client tasks, each connected at the same time (a barrier holds them until
/// all are), each doing [`ROUNDS`] round trips with an echo server of one task per
/// connection, then half-closing and reading the server's EOF. Every byte is checked,
/// the server counts what it echoed, and no registration outlives its socket.
#[test]
fn echo_with_1000_connections_between_tasks() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let n = connections(1000);
    watchdog(120, move || {
        let rt = runtime(2);
        let (sent, echoed, concurrent) = rt.block_on(async move {
            let l = TcpListener::bind(loopback()).await.unwrap();
            let addr = l.local_addr().unwrap();
            let server = weft::spawn(async move {
                let mut conns = Vec::with_capacity(n);
                for _ in 0..n {
                    let (mut s, _) = l.accept().await.unwrap();
                    conns.push(weft::spawn(async move {
                        let mut buf = vec![0u8; 4096];
                        let mut echoed = 0;
                        loop {
                            let k = s.read(&mut buf).await.unwrap();
                            if k == 0 {
                                return echoed;
                            }
                            s.write_all(&buf[..k]).await.unwrap();
                            echoed += k;
                        }
                    }));
                }
                let mut echoed = 0;
                for c in conns {
                    echoed += c.await.unwrap();
                }
                echoed
            });
            let barrier = Arc::new(weft::sync::Barrier::new(n));
            let concurrent = Arc::new(AtomicUsize::new(0));
            let clients: Vec<_> = (0..n)
                .map(|i| {
                    let (barrier, concurrent) = (barrier.clone(), concurrent.clone());
                    weft::spawn(async move {
                        let mut c = TcpStream::connect(addr).await.unwrap();
                        if barrier.wait().await.is_leader() {
                            // Every client is connected now.
                            let stats = weft::Handle::current().stats();
                            concurrent.store(stats.io_sources, SeqCst);
                        }
                        let mut sent = 0;
                        for r in 0..ROUNDS {
                            let msg = message(i, r);
                            c.write_all(&msg).await.unwrap();
                            let mut back = vec![0; msg.len()];
                            c.read_exact(&mut back).await.unwrap();
                            assert!(back == msg, "client {i} round {r}: wrong echo");
                            sent += msg.len();
                        }
                        weft::io::AsyncWriteExt::shutdown(&mut c).await.unwrap();
                        let mut rest = Vec::new();
                        c.read_to_end(&mut rest).await.unwrap();
                        assert!(rest.is_empty(), "client {i}: bytes after the echoes");
                        sent
                    })
                })
                .collect();
            let mut sent = 0;
            for c in clients {
                sent += c.await.unwrap();
            }
            let echoed = server.await.unwrap();
            (sent, echoed, concurrent.load(SeqCst))
        });
        assert_eq!(sent, total_bytes(n));
        assert_eq!(echoed, sent);
        // n clients and the listener at least (accepted streams may lag behind).
        assert!(concurrent > n, "only {concurrent} sockets at the barrier");
        assert_eq!(
            rt.stats().io_sources,
            0,
            "registrations outlived their sockets"
        );
    });
}

/// A burst of 300 connects queues whole before the server accepts any: the listener's
/// backlog is 1,024 (tokio's). With std's and mio's 128 the kernel drops the SYNs past
/// the queue, and the clients' retries come a second or more later (here: each
/// connect has half a second).
#[test]
fn a_burst_of_connects_queues_before_any_accept() {
    let n = connections(300);
    watchdog(60, move || {
        let rt = runtime(1);
        let l = rt.block_on(TcpListener::bind(loopback())).unwrap();
        let clients = rt.block_on(queue_burst(&l, n, Duration::from_millis(500)));
        assert_eq!(clients.len(), n);
    });
}

/// The same with fibers in blocking style: a fiber accepting and one fiber per
/// connection echoing with `std::io::Read`/`Write`, and 1,000 client fibers.
#[test]
fn echo_with_1000_connections_between_fibers() {
    use std::io::{Read, Write};
    let n = connections(1000);
    watchdog(120, move || {
        let rt = runtime(2);
        let (sent, echoed, concurrent) = on(&rt, move || {
            let l = weft::wait(TcpListener::bind(loopback())).unwrap();
            let addr = l.local_addr().unwrap();
            let server = weft::fiber::spawn(move || {
                let conns: Vec<_> = (0..n)
                    .map(|_| {
                        let (mut s, _) = l.accept_blocking().unwrap();
                        weft::fiber::spawn(move || {
                            let mut buf = vec![0u8; 4096];
                            let mut echoed = 0;
                            loop {
                                let k = s.read(&mut buf).unwrap();
                                if k == 0 {
                                    return echoed;
                                }
                                s.write_all(&buf[..k]).unwrap();
                                echoed += k;
                            }
                        })
                    })
                    .collect();
                conns.into_iter().map(|c| c.join().unwrap()).sum::<usize>()
            });
            let barrier = Arc::new(weft::sync::Barrier::new(n));
            let concurrent = Arc::new(AtomicUsize::new(0));
            let clients: Vec<_> = (0..n)
                .map(|i| {
                    let (barrier, concurrent) = (barrier.clone(), concurrent.clone());
                    weft::fiber::spawn(move || {
                        let mut c = TcpStream::connect_blocking(addr).unwrap();
                        if barrier.wait_blocking().is_leader() {
                            let stats = weft::Handle::current().stats();
                            concurrent.store(stats.io_sources, SeqCst);
                        }
                        let mut sent = 0;
                        for r in 0..ROUNDS {
                            let msg = message(i, r);
                            c.write_all(&msg).unwrap();
                            let mut back = vec![0; msg.len()];
                            c.read_exact(&mut back).unwrap();
                            assert!(back == msg, "client {i} round {r}: wrong echo");
                            sent += msg.len();
                        }
                        c.shutdown(Shutdown::Write).unwrap();
                        let mut rest = Vec::new();
                        c.read_to_end(&mut rest).unwrap();
                        assert!(rest.is_empty(), "client {i}: bytes after the echoes");
                        sent
                    })
                })
                .collect();
            let sent: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
            (sent, server.join().unwrap(), concurrent.load(SeqCst))
        });
        assert_eq!(sent, total_bytes(n));
        assert_eq!(echoed, sent);
        assert!(concurrent > n, "only {concurrent} sockets at the barrier");
        assert_eq!(
            rt.stats().io_sources,
            0,
            "registrations outlived their sockets"
        );
    });
}

// ---------------------------------------------------------- half-close ----

/// The client shuts its write side; the server reads the request to EOF, then still
/// writes its reply, which the client reads to EOF. Tasks, then fibers.
#[test]
fn half_close_between_tasks() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    watchdog(20, || {
        let rt = runtime(2);
        rt.block_on(async {
            let l = TcpListener::bind(loopback()).await.unwrap();
            let addr = l.local_addr().unwrap();
            let server = weft::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut req = Vec::new();
                s.read_to_end(&mut req).await.unwrap();
                let reply = format!("got {} bytes", req.len());
                s.write_all(reply.as_bytes()).await.unwrap();
                // A second EOF read on the half-closed side is EOF again.
                assert_eq!(s.read(&mut [0; 8]).await.unwrap(), 0);
                req
            });
            let mut c = TcpStream::connect(addr).await.unwrap();
            let req = vec![7u8; 100_000];
            c.write_all(&req).await.unwrap();
            weft::io::AsyncWriteExt::shutdown(&mut c).await.unwrap();
            let mut reply = String::new();
            c.read_to_string(&mut reply).await.unwrap();
            assert_eq!(reply, "got 100000 bytes");
            assert_eq!(server.await.unwrap(), req);
            // Writing after the shutdown fails.
            assert!(c.write_all(b"late").await.is_err());
        });
    });
}

#[test]
fn half_close_between_fibers() {
    use std::io::{Read, Write};
    watchdog(20, || {
        let rt = runtime(2);
        let (l, mut c, mut s) = pair(&rt);
        drop(l);
        let server = on(&rt, || {
            weft::fiber::spawn(move || {
                let mut req = Vec::new();
                s.read_to_end(&mut req).unwrap();
                s.write_all(format!("got {} bytes", req.len()).as_bytes())
                    .unwrap();
                req.len()
            })
        });
        let client = on(&rt, || {
            weft::fiber::spawn(move || {
                c.write_all(&[1u8; 50_000]).unwrap();
                c.shutdown(Shutdown::Write).unwrap();
                let mut reply = String::new();
                c.read_to_string(&mut reply).unwrap();
                reply
            })
        });
        assert_eq!(client.join().unwrap(), "got 50000 bytes");
        assert_eq!(server.join().unwrap(), 50_000);
    });
}

// --------------------------------------------------------------- reset ----

fn is_reset(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// The server resets the connection (linger 0, then close) while a client task waits
/// in `read` and a client thread in a blocking `read` on another connection: each
/// gets `ConnectionReset`, and a write after it fails too.
#[test]
fn a_peer_reset_is_an_error() {
    watchdog(20, || {
        let rt = runtime(2);
        let (_l1, c1, s1) = pair(&rt);
        let (_l2, c2, s2) = pair(&rt);
        let task = rt.spawn(async move {
            use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let mut c = c1;
            let e = c.read(&mut [0; 16]).await.unwrap_err();
            let mut write_err = None;
            for _ in 0..100 {
                if let Err(e) = c.write_all(b"after the reset").await {
                    write_err = Some(e);
                    break;
                }
            }
            (e, write_err)
        });
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut c = c2;
            let e = c.read(&mut [0; 16]).unwrap_err();
            let write_err = (0..100).find_map(|_| c.write_all(b"after the reset").err());
            (e, write_err)
        });
        // Both are waiting in `read` by now (or get the reset the moment they read).
        std::thread::sleep(Duration::from_millis(100));
        for s in [s1, s2] {
            linger_zero(s.as_raw_fd());
            drop(s);
        }
        for (e, write_err) in [task.join().unwrap(), thread.join().unwrap()] {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
            let w = write_err.expect("a write after the reset succeeded 100 times");
            assert!(is_reset(&w), "{w}");
        }
    });
}

// ------------------------------------------- shutdown from elsewhere ----

/// A fiber, a task and a plain thread each wait in `read` on a connection of their
/// own; another thread shuts each connection down (both directions). Each read ends
/// with EOF (or an error) at once, not when the peer closes (it never does here).
#[test]
fn shutdown_from_another_thread_ends_blocked_reads() {
    watchdog(20, || {
        let rt = runtime(2);
        let conns: Vec<_> = (0..3).map(|_| pair(&rt)).collect();
        let mut streams = Vec::new();
        let mut keep = Vec::new();
        for (l, c, s) in conns {
            streams.push(Arc::new(c));
            keep.push((l, s));
        }
        let started = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<(&'static str, std::io::Result<usize>)>();
        {
            let (c, started, tx) = (streams[0].clone(), started.clone(), tx.clone());
            on(&rt, || {
                drop(weft::fiber::spawn(move || {
                    use std::io::Read;
                    started.fetch_add(1, SeqCst);
                    let r = (&*c).read(&mut [0; 16]);
                    tx.send(("fiber", r)).unwrap();
                }))
            });
        }
        {
            let (c, started, tx) = (streams[1].clone(), started.clone(), tx.clone());
            drop(rt.spawn(async move {
                started.fetch_add(1, SeqCst);
                // The readiness form: wait, then try, until the read gives a result.
                let r = loop {
                    if let Err(e) = c.readable().await {
                        break Err(e);
                    }
                    match c.try_read(&mut [0; 16]) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        r => break r,
                    }
                };
                tx.send(("task", r)).unwrap();
            }));
        }
        {
            let (c, started, tx) = (streams[2].clone(), started.clone(), tx.clone());
            std::thread::spawn(move || {
                use std::io::Read;
                started.fetch_add(1, SeqCst);
                let r = (&*c).read(&mut [0; 16]);
                tx.send(("thread", r)).unwrap();
            });
        }
        drop(tx);
        common::wait_until("the three readers started", || started.load(SeqCst) == 3);
        std::thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "a read ended before the shutdown");
        let shut_at = Instant::now();
        let closer = {
            let streams = streams.clone();
            std::thread::spawn(move || {
                for c in &streams {
                    c.shutdown(Shutdown::Both).unwrap();
                }
            })
        };
        let mut who = Vec::new();
        for _ in 0..3 {
            let (name, r) = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("a reader still waits 5 s after the shutdown");
            match r {
                Ok(n) => assert_eq!(n, 0, "{name} read {n} bytes nobody sent"),
                Err(e) => println!("{name}: {e}"),
            }
            who.push(name);
        }
        closer.join().unwrap();
        assert!(shut_at.elapsed() < Duration::from_secs(5));
        who.sort_unstable();
        assert_eq!(who, ["fiber", "task", "thread"]);
        drop(keep);
    });
}

// --------------------------------------------------------------- accept ----

/// `threads` plain threads each connect `per` times (std sockets, 1 s connect
/// timeout), write a byte and close; returns (connected, refused or failed).
fn flood(
    addr: SocketAddr,
    threads: usize,
    per: usize,
) -> Vec<std::thread::JoinHandle<(usize, usize)>> {
    (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                use std::io::Write;
                let (mut ok, mut failed) = (0, 0);
                for _ in 0..per {
                    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                        Ok(mut s) => {
                            let _ = s.write_all(b"x");
                            ok += 1;
                        }
                        Err(_) => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect()
}

/// An acceptor task takes 50 connections out of a flood of 400 and then drops the
/// listener; the flood's later connects are refused (or reset), none hangs, and the
/// acceptor saw exactly 50 each with its byte.
#[test]
fn accept_under_a_flood_then_drop_the_listener() {
    use weft::io::AsyncReadExt as _;
    watchdog(60, || {
        let rt = runtime(2);
        let l = rt.block_on(TcpListener::bind(loopback())).unwrap();
        let addr = l.local_addr().unwrap();
        let acceptor = rt.spawn(async move {
            let mut got = 0;
            for _ in 0..50 {
                let (mut s, _) = l.accept().await.unwrap();
                let mut b = [0u8; 1];
                // The byte, or EOF/reset if the client went before writing.
                if let Ok(1) = s.read(&mut b).await {
                    assert_eq!(&b, b"x");
                }
                got += 1;
            }
            drop(l);
            got
        });
        let flood1 = flood(addr, 4, 100);
        assert_eq!(acceptor.join().unwrap(), 50);
        // The listener is closed now: every connect is refused.
        let (ok, failed) = flood(addr, 1, 20).pop().unwrap().join().unwrap();
        assert_eq!((ok, failed), (0, 20), "connects to a dropped listener");
        let (mut ok, mut failed) = (0, 0);
        for t in flood1 {
            let (o, f) = t.join().unwrap();
            ok += o;
            failed += f;
        }
        assert_eq!(ok + failed, 400);
        assert!(ok >= 50, "{ok} connects succeeded");
        assert_eq!(rt.stats().io_sources, 0);
    });
}

/// A task and a fiber accept from one listener under a flood; the runtime is dropped
/// mid-way. The drop ends both (with the shutdown error, or by cancelling them), the
/// flood's threads all finish, and nothing panics.
#[test]
fn accept_under_a_flood_then_drop_the_runtime() {
    watchdog(60, || {
        let rt = runtime(2);
        let l = Arc::new(rt.block_on(TcpListener::bind(loopback())).unwrap());
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<(&'static str, std::io::Error)>();
        {
            let (l, accepted, tx) = (l.clone(), accepted.clone(), tx.clone());
            drop(rt.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok(_) => accepted.fetch_add(1, SeqCst),
                        Err(e) => return tx.send(("task", e)).unwrap(),
                    };
                }
            }));
        }
        {
            let (l, accepted, tx) = (l.clone(), accepted.clone(), tx.clone());
            on(&rt, || {
                drop(weft::fiber::spawn(move || loop {
                    match l.accept_blocking() {
                        Ok(_) => accepted.fetch_add(1, SeqCst),
                        Err(e) => return tx.send(("fiber", e)).unwrap(),
                    };
                }))
            });
        }
        drop(tx);
        let flood = flood(addr, 4, 100);
        common::wait_until("30 connections accepted", || accepted.load(SeqCst) >= 30);
        let start = Instant::now();
        drop(rt);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the drop took {:?}",
            start.elapsed()
        );
        // Each acceptor either got the shutdown error or was cancelled (its sender
        // dropped unsent): the channel closes either way.
        let mut ended = Vec::new();
        while let Ok((who, e)) = rx.recv_timeout(Duration::from_secs(10)) {
            assert!(
                !matches!(e.kind(), std::io::ErrorKind::WouldBlock),
                "{who}: {e}"
            );
            ended.push(who);
        }
        println!("acceptors that saw the shutdown error: {ended:?}");
        // The listener outlives its runtime: it fails now, it does not hang.
        let e = l.accept_blocking().unwrap_err();
        println!("accept after the runtime's drop: {e}");
        // The acceptors let go of it: closing it refuses the rest of the flood at
        // once (its backlog of 128 is full, and further connects would wait).
        let l = Arc::try_unwrap(l).expect("an acceptor still holds the listener");
        drop(l);
        for t in flood {
            let (ok, failed) = t.join().unwrap();
            assert_eq!(ok + failed, 100);
        }
    });
}

// ------------------------------------------------------------- timeouts ----

/// A blocking read with a 100 ms timeout and no data gives `WouldBlock` after about
/// the timeout, on a plain thread and in a fiber; data that arrives in time is read.
#[test]
fn read_timeouts_on_a_thread_and_a_fiber() {
    use std::io::{Read, Write};
    watchdog(20, || {
        let rt = runtime(2);
        let timeout = Duration::from_millis(100);
        let check = move |c: &TcpStream| {
            c.set_read_timeout(Some(timeout)).unwrap();
            assert_eq!(c.read_timeout().unwrap(), Some(timeout));
            let start = Instant::now();
            let e = (&*c).read(&mut [0; 8]).unwrap_err();
            let took = start.elapsed();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            assert!(took >= timeout - Duration::from_millis(5), "{took:?}");
            assert!(took < Duration::from_secs(3), "{took:?}");
        };
        let (_l, c, mut s) = pair(&rt);
        std::thread::scope(|scope| {
            scope.spawn(|| check(&c)).join().unwrap();
        });
        // In a fiber.
        let (_l2, c2, s2) = pair(&rt);
        let fiber = on(&rt, || {
            weft::fiber::spawn(move || {
                check(&c2);
                // Data within the timeout is read.
                c2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut b = [0; 5];
                (&c2).read_exact(&mut b).unwrap();
                b
            })
        });
        std::thread::sleep(Duration::from_millis(300));
        (&s2).write_all(b"hello").unwrap();
        assert_eq!(&fiber.join().unwrap(), b"hello");
        // The timeout taken off again: a read waits for the data.
        c.set_read_timeout(None).unwrap();
        assert_eq!(c.read_timeout().unwrap(), None);
        s.write_all(b"!").unwrap();
        assert_eq!((&c).read(&mut [0; 8]).unwrap(), 1);
    });
}

/// A blocking write with a 100 ms timeout to a peer that does not read: once the
/// buffers are full, a write fails with `WouldBlock` after about the timeout.
#[test]
fn write_timeout_when_the_peer_does_not_read() {
    use std::io::Write;
    watchdog(30, || {
        let rt = runtime(2);
        let (_l, mut c, _s) = pair(&rt);
        let timeout = Duration::from_millis(100);
        c.set_write_timeout(Some(timeout)).unwrap();
        assert_eq!(c.write_timeout().unwrap(), Some(timeout));
        let buf = vec![0u8; 1 << 16];
        let mut written = 0usize;
        let (e, took) = loop {
            assert!(
                written < 1 << 30,
                "1 GiB written to a peer that reads nothing"
            );
            let start = Instant::now();
            match c.write(&buf) {
                Ok(n) => written += n,
                Err(e) => break (e, start.elapsed()),
            }
        };
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert!(took >= timeout - Duration::from_millis(5), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert!(written > 0);
        println!("the buffers took {written} bytes");
        // In a fiber too.
        let fiber = on(&rt, || {
            weft::fiber::spawn(move || {
                let start = Instant::now();
                let e = c.write(&[0u8; 1 << 16]).unwrap_err();
                (e.kind(), start.elapsed())
            })
        });
        let (kind, took) = fiber.join().unwrap();
        assert_eq!(kind, std::io::ErrorKind::WouldBlock);
        assert!(took >= timeout - Duration::from_millis(5), "{took:?}");
    });
}

// ---------------------------------------------------------- runtime drop ----

/// A plain thread, a task and a fiber wait in `read` on sockets of a runtime that is
/// then dropped: the thread wakes with an error, the task is dropped with the runtime,
/// and the fiber gets the error or is cancelled; none waits on.
#[test]
fn dropping_the_runtime_wakes_blocked_readers() {
    watchdog(30, || {
        let rt = runtime(2);
        let (_l, c1, _s1) = pair(&rt);
        let (_l2, c2, _s2) = pair(&rt);
        let (_l3, c3, _s3) = pair(&rt);
        let thread = std::thread::spawn(move || {
            use std::io::Read;
            (&c1).read(&mut [0; 8])
        });
        struct Dropped(Arc<AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let task_dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(task_dropped.clone());
        let task = rt.spawn(async move {
            use weft::io::AsyncReadExt as _;
            let _guard = guard;
            let mut c = c2;
            c.read(&mut [0; 8]).await
        });
        let (tx, rx) = mpsc::channel();
        on(&rt, || {
            drop(weft::fiber::spawn(move || {
                use std::io::Read;
                let _ = tx.send((&c3).read(&mut [0; 8]));
            }))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!thread.is_finished() && !task.is_finished());
        let start = Instant::now();
        drop(rt);
        let e = thread.join().unwrap().unwrap_err();
        println!("the thread's read after the drop: {e}");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(task_dropped.load(SeqCst), "the task outlived its runtime");
        match task.join() {
            Ok(r) => assert!(r.is_err(), "{r:?}"),
            Err(e) => assert!(e.is_cancelled(), "{e}"),
        }
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(r) => assert!(r.is_err(), "the fiber read {r:?}"),
            Err(mpsc::RecvTimeoutError::Disconnected) => {} // unwound
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the fiber still waits"),
        }
    });
}

// ----------------------------------------------------------------- idle ----

/// Writes `msg` and reads as many bytes back, blocking.
fn ping(c: &TcpStream, msg: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut c = c;
    c.write_all(msg).unwrap();
    let mut b = vec![0u8; msg.len()];
    c.read_exact(&mut b).unwrap();
    b
}

/// Context switches so far of this process's threads whose name starts with `prefix`
/// (the workers of a runtime named so), by name.
fn switches(prefix: &str) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let dir = t.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        if !comm.starts_with(prefix) || comm.contains("blocking") || comm.contains("sysmon") {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let n: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
        v.push((comm, n));
    }
    v.sort();
    v
}

/// A server with a listener waiting in `accept` (a task) and an idle connection (a
/// task waiting in `read`) makes no wake-ups: in 300 ms no worker polls, parks, is
/// woken or switches context, and the driver dispatches no event.
#[test]
fn an_idle_server_makes_no_wakeups() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    watchdog(30, || {
        let rt = weft::Builder::new()
            .worker_threads(2)
            .thread_name("nidle")
            .build()
            .unwrap();
        let (l, c, s) = pair(&rt);
        let acceptor = rt.spawn(async move { l.accept().await.map(|_| ()) });
        let reader = rt.spawn(async move {
            let mut s = s;
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
            b
        });
        // Let every worker go to sleep.
        std::thread::sleep(Duration::from_millis(200));
        let (before, sw_before) = (rt.stats(), switches("nidle-"));
        std::thread::sleep(Duration::from_millis(300));
        let (after, sw_after) = (rt.stats(), switches("nidle-"));
        assert_eq!(sw_before.len(), 3, "{sw_before:?}");
        assert_eq!(after.io_sources, 3);
        assert_eq!(after.total_polled, before.total_polled, "polls while idle");
        assert_eq!(
            after.total_parked, before.total_parked,
            "a worker woke and parked"
        );
        assert_eq!(
            after.total_wake_calls, before.total_wake_calls,
            "wakes while idle"
        );
        assert_eq!(after.io_events, before.io_events, "events while idle");
        let spin = |s: &weft::Stats| s.pools.iter().map(|p| p.total_spin_wakeups).sum::<u64>();
        assert_eq!(spin(&after), spin(&before));
        assert_eq!(sw_after, sw_before, "worker threads ran while idle");
        // And it is not asleep for good: the connection is served.
        assert_eq!(&ping(&c, b"ping"), b"ping");
        assert_eq!(&reader.join().unwrap(), b"ping");
        drop(rt);
        assert!(acceptor.join().map_or(true, |r| r.is_err()));
    });
}

// ------------------------------------------------------------------ API ----

/// `readable`/`try_read`, `writable`/`try_write` and `peek`: a `try_read` with nothing
/// there is `WouldBlock`, `readable` waits until data comes, `peek` leaves it there.
#[test]
fn readiness_try_io_and_peek() {
    use weft::io::AsyncReadExt as _;
    watchdog(20, || {
        let rt = runtime(2);
        let (_l, mut c, s) = pair(&rt);
        rt.block_on(async move {
            let mut buf = [0u8; 64];
            let e = c.try_read(&mut buf).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
            // Nothing to read: `readable` waits.
            let r = weft::time::timeout(Duration::from_millis(100), c.readable()).await;
            assert!(r.is_err(), "readable() with nothing to read: {r:?}");
            let writer = weft::spawn(async move {
                weft::time::sleep(Duration::from_millis(50)).await;
                s.writable().await.unwrap();
                assert_eq!(s.try_write(b"hello").unwrap(), 5);
                s
            });
            let mut got = Vec::new();
            for _ in 0..100 {
                if got.len() == 5 {
                    break;
                }
                c.readable().await.unwrap();
                match c.try_read(&mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(got, b"hello");
            let s = writer.await.unwrap();
            // A full socket: `try_write` fills it, then says `WouldBlock`.
            let mut total = 0;
            let big = vec![0u8; 1 << 16];
            let e = loop {
                assert!(total < 1 << 30);
                match s.try_write(&big) {
                    Ok(n) => total += n,
                    Err(e) => break e,
                }
            };
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
            // Drain on the other side until the writer may write again.
            let drain = weft::spawn(async move {
                let mut left = total;
                let mut buf = vec![0u8; 1 << 16];
                while left > 0 {
                    let n = c.read(&mut buf).await.unwrap();
                    assert!(n > 0);
                    left -= n;
                }
                c
            });
            s.writable().await.unwrap();
            let mut c = drain.await.unwrap();
            // peek: the data stays for the read.
            assert_eq!(s.try_write(b"abc").unwrap(), 3);
            let mut p = [0u8; 8];
            let mut n = 0;
            for _ in 0..100 {
                n = c.peek(&mut p).await.unwrap();
                if n == 3 {
                    break;
                }
                weft::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(&p[..n], b"abc");
            let mut b = [0u8; 3];
            c.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"abc");
            assert_eq!(
                c.try_read(&mut b).unwrap_err().kind(),
                std::io::ErrorKind::WouldBlock
            );
        });
    });
}

/// `into_split`: the read half in one task, the write half in another, against an
/// echo server; dropping the write half shuts the write side (the server sees EOF);
/// `reunite` gives the stream back, and refuses halves of two streams.
#[test]
fn into_split_halves_in_two_tasks_and_reunite() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    watchdog(20, || {
        let rt = runtime(2);
        rt.block_on(async {
            let l = TcpListener::bind(loopback()).await.unwrap();
            let addr = l.local_addr().unwrap();
            let server = weft::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                loop {
                    let k = s.read(&mut buf).await.unwrap();
                    if k == 0 {
                        break n;
                    }
                    s.write_all(&buf[..k]).await.unwrap();
                    n += k;
                }
            });
            let c = TcpStream::connect(addr).await.unwrap();
            let local = c.local_addr().unwrap();
            let (mut r, mut w) = c.into_split();
            assert_eq!(r.local_addr().unwrap(), local);
            assert_eq!(w.peer_addr().unwrap(), addr);
            let msgs: Vec<Vec<u8>> = (0..50).map(|i| message(i, 0)).collect();
            let expected: Vec<u8> = msgs.concat();
            let len = expected.len();
            let writer = weft::spawn(async move {
                for m in &msgs {
                    w.write_all(m).await.unwrap();
                }
                w
            });
            let reader = weft::spawn(async move {
                let mut got = vec![0u8; len];
                r.read_exact(&mut got).await.unwrap();
                (r, got)
            });
            let w = writer.await.unwrap();
            let (r, got) = reader.await.unwrap();
            assert!(got == expected, "the echoes came back wrong");
            // Back together, and still connected.
            let mut c = r.reunite(w).unwrap();
            c.write_all(b"again").await.unwrap();
            let mut b = [0u8; 5];
            c.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"again");
            // Halves of two streams do not reunite; each goes back to its own.
            let other = TcpStream::connect(addr).await;
            let other = other.unwrap();
            let (r1, w1) = c.into_split();
            let (r2, w2) = other.into_split();
            let weft::net::ReuniteError(r1, w2) = r1.reunite(w2).unwrap_err();
            let mut c = r1.reunite(w1).unwrap();
            drop(r2.reunite(w2).unwrap());
            // Dropping the write half shut the write side: the server saw EOF.
            let (r, w) = {
                c.write_all(b"end").await.unwrap();
                c.into_split()
            };
            drop(w);
            let mut r = r;
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"end");
            assert_eq!(server.await.unwrap(), len + 5 + 3);
        });
    });
}

/// `from_std` and `into_std` both ways, for the listener and the stream; the std
/// sockets come back non-blocking and work once made blocking again.
#[test]
fn from_std_into_std_round_trip() {
    use std::io::{Read, Write};
    watchdog(20, || {
        let rt = runtime(2);
        let std_l = std::net::TcpListener::bind(loopback()).unwrap();
        let addr = std_l.local_addr().unwrap();
        let l = on(&rt, || TcpListener::from_std(std_l)).unwrap();
        assert_eq!(l.local_addr().unwrap(), addr);
        let std_c = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = on(&rt, || l.accept_blocking()).unwrap();
        let c = on(&rt, || TcpStream::from_std(std_c)).unwrap();
        assert_eq!(rt.stats().io_sources, 3);
        // Through weft.
        (&c).write_all(b"one").unwrap();
        let mut b = [0u8; 3];
        (&s).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"one");
        // Out again: deregistered, non-blocking, usable once made blocking.
        let std_s = s.into_std().unwrap();
        let std_c = c.into_std().unwrap();
        let std_l = l.into_std().unwrap();
        assert_eq!(rt.stats().io_sources, 0);
        let e = std_l.accept().unwrap_err();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "into_std made it blocking"
        );
        std_s.set_nonblocking(false).unwrap();
        (&std_c).write_all(b"two").unwrap();
        (&std_s).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"two");
        // And in once more.
        let c = on(&rt, || TcpStream::from_std(std_c)).unwrap();
        (&std_s).write_all(b"three").unwrap();
        let mut b = [0u8; 5];
        (&c).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"three");
    });
}

/// `set_nodelay`/`nodelay` and `set_ttl`/`ttl` on a stream and a listener.
#[test]
fn nodelay_and_ttl() {
    watchdog(20, || {
        let rt = runtime(1);
        let (l, c, _s) = pair(&rt);
        for v in [true, false, true] {
            c.set_nodelay(v).unwrap();
            assert_eq!(c.nodelay().unwrap(), v);
        }
        c.set_ttl(42).unwrap();
        assert_eq!(c.ttl().unwrap(), 42);
        l.set_ttl(17).unwrap();
        assert_eq!(l.ttl().unwrap(), 17);
        // The option is the socket's: std sees it too.
        let std_c = c.into_std().unwrap();
        assert_eq!(std_c.ttl().unwrap(), 42);
        assert!(std_c.nodelay().unwrap());
    });
}

// ------------------------------------------------------- registration ----

const CHILD: &str = "WEFT_NET_TCP_CHILD";

/// A socket made on a plain thread registers with the most recently started live
/// runtime; with none, making it is an error, not a panic. Runs in a child process:
/// no other test's runtime may be around.
#[test]
fn sockets_made_on_a_plain_thread_go_to_the_latest_runtime() {
    watchdog(30, || {
        let out = common::child::run(
            "child_sockets_on_a_plain_thread",
            &[(CHILD, "1")],
            Duration::from_secs(20),
        );
        out.assert_finished();
    });
}

#[test]
fn child_sockets_on_a_plain_thread() {
    use std::io::{Read, Write};
    if std::env::var(CHILD).is_err() {
        return;
    }
    let std_l = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = std_l.local_addr().unwrap();
    // No runtime at all: errors.
    assert!(weft::Handle::try_current().is_err());
    let e = weft::wait(TcpListener::bind(loopback())).unwrap_err();
    println!("bind without a runtime: {e}");
    assert!(TcpStream::connect_blocking(addr).is_err());
    assert!(weft::wait(TcpStream::connect(addr)).is_err());
    // ... without trying to connect: nothing reached the listener.
    std_l.set_nonblocking(true).unwrap();
    let e = std_l.accept().map(|_| ()).unwrap_err();
    assert_eq!(
        e.kind(),
        std::io::ErrorKind::WouldBlock,
        "a failed connect reached the peer"
    );
    std_l.set_nonblocking(false).unwrap();
    // ... and no socket file left behind by a Unix bind that failed for want of one
    // (it would make the next bind to the path fail).
    let path = std::env::temp_dir().join(format!("weft-net-tcp-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    assert!(weft::net::UnixListener::bind(&path).is_err());
    assert!(weft::net::UnixDatagram::bind(&path).is_err());
    assert!(!path.exists(), "a failed bind left {path:?} behind");
    let std_c = std::net::TcpStream::connect(addr).unwrap();
    let std_c2 = std_c.try_clone().unwrap();
    assert!(TcpStream::from_std(std_c).is_err());
    let std_l2 = std_l.try_clone().unwrap();
    assert!(TcpListener::from_std(std_l).is_err());

    // One runtime: everything goes to it.
    let rt1 = runtime(1);
    let l = TcpListener::from_std(std_l2).unwrap();
    assert_eq!(rt1.stats().io_sources, 1);
    let c = TcpStream::from_std(std_c2).unwrap();
    assert_eq!(rt1.stats().io_sources, 2);
    // The std client connected before: its server side is in the backlog.
    let (s, _) = l.accept_blocking().unwrap();
    assert_eq!(rt1.stats().io_sources, 3);

    // A second runtime started later: new sockets go to it, accepted ones go where
    // their listener is.
    let rt2 = runtime(1);
    let c2 = TcpStream::connect_blocking(addr).unwrap();
    assert_eq!(rt2.stats().io_sources, 1);
    let (s2, _) = l.accept_blocking().unwrap();
    assert_eq!(rt1.stats().io_sources, 4);
    assert_eq!(rt2.stats().io_sources, 1);
    (&c2).write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    (&s2).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hi");
    (&c).write_all(b"yo").unwrap();
    (&s).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"yo");

    // rt2 dropped: its socket fails, new ones go to rt1 again.
    drop(rt2);
    assert!(
        (&c2).read(&mut b).is_err(),
        "a socket of a dropped runtime read"
    );
    let c3 = TcpStream::connect_blocking(addr).unwrap();
    assert_eq!(rt1.stats().io_sources, 5);
    drop((c, c2, c3, s, s2));
    assert_eq!(rt1.stats().io_sources, 1);

    // None left: an error again.
    drop(rt1);
    assert!(TcpStream::connect_blocking(addr).is_err());
    drop(l);
    println!("CHILD done=ok");
}
