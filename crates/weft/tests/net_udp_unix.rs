//! UDP and Unix domain sockets from tasks, fibers and plain threads: round trips,
//! timeouts, splitting, the std conversions, and waiters woken when the runtime goes.
//! Traffic goes only to loopback and to paths under a per-process temporary folder.

use std::io::ErrorKind;
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::{
    OwnedReadHalf, OwnedWriteHalf, ReadHalf, UdpSocket, UnixDatagram, UnixListener, UnixStream,
    WriteHalf,
};

/// A folder of its own under the temporary folder (the process id and `name` in its
/// name), removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("weft-net-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rt() -> weft::Runtime {
    weft::Builder::new().worker_threads(2).build().unwrap()
}

/// Runs `f` on this thread with `rt` as the current runtime, so that the sockets and
/// fibers it makes are `rt`'s (not those of whichever runtime another test started
/// last, which that test may drop at any time).
fn on<T>(rt: &weft::Runtime, f: impl FnOnce() -> T) -> T {
    rt.block_on(async { f() })
}

#[test]
fn socket_types_are_send_sync_fd_and_streams_unpin() {
    fn socket<T: Send + Sync + AsRawFd + AsFd + std::fmt::Debug>() {}
    fn stream<T: Send + Sync + Unpin + std::io::Read + std::io::Write>()
    where
        for<'a> &'a T: std::io::Read + std::io::Write,
    {
    }
    fn half<T: Send + Sync + Unpin>() {}
    socket::<UdpSocket>();
    socket::<UnixListener>();
    socket::<UnixStream>();
    socket::<UnixDatagram>();
    socket::<weft::net::TcpListener>();
    socket::<weft::net::TcpStream>();
    stream::<UnixStream>();
    stream::<weft::net::TcpStream>();
    half::<ReadHalf<'static, UnixStream>>();
    half::<WriteHalf<'static, UnixStream>>();
    half::<OwnedReadHalf<UnixStream>>();
    half::<OwnedWriteHalf<UnixStream>>();
    half::<OwnedReadHalf>();
    fn futures_io<T: futures_io::AsyncRead + futures_io::AsyncWrite + Unpin>() {}
    futures_io::<UnixStream>();
    futures_io::<weft::net::TcpStream>();
}

#[test]
fn udp_round_trips_between_tasks() {
    rt().block_on(async {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let echo = weft::spawn(async move {
            let mut buf = [0u8; 2048];
            loop {
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                assert_eq!(server.send_to(&buf[..n], from).await.unwrap(), n);
            }
        });
        // Unconnected: send_to and recv_from.
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for i in 0..50u32 {
            let msg = vec![i as u8; 1 + i as usize * 20];
            client.send_to(&msg, addr).await.unwrap();
            let mut back = vec![0; 2048];
            let (n, from) = client.recv_from(&mut back).await.unwrap();
            assert_eq!(from, addr);
            assert_eq!(&back[..n], &msg[..]);
        }
        // Connected: send and recv.
        let connected = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        connected.connect(addr).await.unwrap();
        assert_eq!(connected.peer_addr().unwrap(), addr);
        for i in 0..50u32 {
            connected.send(&i.to_le_bytes()).await.unwrap();
            let mut back = [0; 8];
            assert_eq!(connected.recv(&mut back).await.unwrap(), 4);
            assert_eq!(back[..4], i.to_le_bytes());
        }
        client.send_to(&[], addr).await.unwrap();
        echo.await.unwrap();
    });
}

#[test]
fn udp_round_trips_between_fibers_and_threads() {
    let rt = rt();
    on(&rt, || {
        let server = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
        let addr = server.local_addr().unwrap();
        let echo = weft::fiber::spawn(move || {
            let mut buf = [0u8; 256];
            loop {
                let (n, from) = server.recv_from_blocking(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                server.send_to_blocking(&buf[..n], from).unwrap();
            }
        });
        // A fiber client, unconnected.
        let fiber_client = weft::fiber::spawn(move || {
            let c = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
            for i in 0..100u32 {
                c.send_to_blocking(&i.to_le_bytes(), addr).unwrap();
                let mut back = [0; 4];
                let (n, from) = c.recv_from_blocking(&mut back).unwrap();
                assert_eq!((n, from), (4, addr));
                assert_eq!(back, i.to_le_bytes());
            }
        });
        // A plain thread client, connected.
        let c = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
        weft::wait(c.connect(addr)).unwrap();
        for i in 0..100u32 {
            c.send_blocking(&i.to_be_bytes()).unwrap();
            let mut back = [0; 4];
            assert_eq!(c.recv_blocking(&mut back).unwrap(), 4);
            assert_eq!(back, i.to_be_bytes());
        }
        fiber_client.join().unwrap();
        c.send_blocking(&[]).unwrap();
        echo.join().unwrap();
    });
}

#[test]
fn udp_peek_from_leaves_the_datagram() {
    rt().block_on(async {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        a.send_to(b"peeked", b.local_addr().unwrap()).await.unwrap();
        let mut buf = [0; 16];
        let (n, from) = b.peek_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], from), (&b"peeked"[..], a.local_addr().unwrap()));
        let (n, from) = b.peek_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], from), (&b"peeked"[..], a.local_addr().unwrap()));
        let mut buf = [0; 16];
        let (n, _) = b.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"peeked");
        assert_eq!(
            b.try_recv_from(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
    });
}

#[test]
fn udp_recv_timeout_is_would_block() {
    let rt = rt();
    on(&rt, || {
        let s = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
        assert_eq!(
            s.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert!(s.set_write_timeout(Some(Duration::ZERO)).is_err());
        assert_eq!(s.read_timeout().unwrap(), None);
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_millis(50)));
        let start = Instant::now();
        let e = s.recv_from_blocking(&mut [0; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        assert!(start.elapsed() >= Duration::from_millis(45));
        // From a fiber too.
        let s = Arc::new(s);
        let s2 = s.clone();
        let e = weft::fiber::spawn(move || s2.recv_blocking(&mut [0; 8]).unwrap_err())
            .join()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        // A datagram that is there is read at once.
        let t = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
        t.send_to_blocking(b"x", s.local_addr().unwrap()).unwrap();
        assert_eq!(s.recv_from_blocking(&mut [0; 8]).unwrap().0, 1);
    });
}

#[test]
fn udp_try_forms_readiness_and_options() {
    rt().block_on(async {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut buf = [0; 8];
        assert_eq!(
            b.try_recv_from(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        a.writable().await.unwrap();
        assert_eq!(a.try_send_to(b"abc", b.local_addr().unwrap()).unwrap(), 3);
        // Readable may say so before the datagram is there: try until it is.
        let n = loop {
            b.readable().await.unwrap();
            match b.try_recv_from(&mut buf) {
                Ok((n, _)) => break n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(&buf[..n], b"abc");
        b.connect(a.local_addr().unwrap()).await.unwrap();
        assert_eq!(b.try_send(b"de").unwrap(), 2);
        a.connect(b.local_addr().unwrap()).await.unwrap();
        assert_eq!(a.recv(&mut buf).await.unwrap(), 2);
        assert_eq!(
            a.try_recv(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        a.set_broadcast(true).unwrap();
        assert!(a.broadcast().unwrap());
        a.set_ttl(7).unwrap();
        assert_eq!(a.ttl().unwrap(), 7);
        assert!(format!("{a:?}").contains("UdpSocket"));
    });
}

#[test]
fn udp_std_round_trip() {
    let rt = rt();
    let std_sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = std_sock.local_addr().unwrap();
    let s = rt
        .block_on(async { UdpSocket::from_std(std_sock) })
        .unwrap();
    assert_eq!(s.local_addr().unwrap(), addr);
    let back = s.into_std().unwrap();
    assert_eq!(back.local_addr().unwrap(), addr);
}

#[test]
fn blocked_udp_receiver_wakes_with_an_error_when_the_runtime_drops() {
    let rt = rt();
    let s = rt.block_on(UdpSocket::bind("127.0.0.1:0")).unwrap();
    let t = std::thread::spawn(move || s.recv_from_blocking(&mut [0; 8]).map(|_| ()));
    std::thread::sleep(Duration::from_millis(50));
    drop(rt);
    assert!(t.join().unwrap().is_err());
}

#[test]
fn unix_stream_echo_between_tasks() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = TempDir::new("stream-tasks");
    let path = dir.path("echo.sock");
    rt().block_on(async {
        let l = UnixListener::bind(&path).unwrap();
        assert_eq!(l.local_addr().unwrap().as_pathname(), Some(path.as_path()));
        let server = weft::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0; 1 << 16];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let mut c = UnixStream::connect(&path).await.unwrap();
        assert_eq!(c.peer_addr().unwrap().as_pathname(), Some(path.as_path()));
        for i in 0..100u32 {
            let msg = vec![i as u8; 1000 + i as usize * 300];
            c.write_all(&msg).await.unwrap();
            let mut back = vec![0; msg.len()];
            c.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg);
        }
        // `poll_close` shuts the write side: the server reads EOF and ends.
        weft::io::AsyncWriteExt::shutdown(&mut c).await.unwrap();
        server.await.unwrap();
    });
}

#[test]
fn unix_stream_echo_between_fibers_and_a_thread() {
    use std::io::{Read as _, Write as _};
    let dir = TempDir::new("stream-fibers");
    let path = dir.path("echo.sock");
    let rt = rt();
    on(&rt, || {
        let l = UnixListener::bind(&path).unwrap();
        let server = weft::fiber::spawn(move || {
            for _ in 0..2 {
                let (s, _) = l.accept_blocking().unwrap();
                weft::fiber::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 4096];
                    loop {
                        let n = s.read(&mut buf).unwrap();
                        if n == 0 {
                            break;
                        }
                        s.write_all(&buf[..n]).unwrap();
                    }
                });
            }
        });
        let client = |path: PathBuf| {
            move || {
                let mut c = UnixStream::connect_blocking(&path).unwrap();
                for i in 0..200u32 {
                    c.write_all(&i.to_le_bytes()).unwrap();
                    let mut back = [0; 4];
                    c.read_exact(&mut back).unwrap();
                    assert_eq!(back, i.to_le_bytes());
                }
                c.shutdown(Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                c.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
            }
        };
        let fiber_client = weft::fiber::spawn(client(path.clone()));
        client(path.clone())();
        fiber_client.join().unwrap();
        server.join().unwrap();
    });
}

#[test]
fn unix_stream_pair_split_try_and_timeouts() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    rt().block_on(async {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut ar, mut aw) = a.into_split();
        let (mut br, mut bw) = b.into_split();
        aw.write_all(b"to b").await.unwrap();
        let mut buf = [0; 4];
        br.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"to b");
        bw.write_all(b"to a").await.unwrap();
        ar.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"to a");
        assert_eq!(
            ar.try_read(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        bw.writable().await.unwrap();
        assert_eq!(bw.try_write(b"xy").unwrap(), 2);
        ar.readable().await.unwrap();
        assert_eq!(ar.try_read(&mut buf).unwrap(), 2);
        assert!(ar.peer_addr().unwrap().is_unnamed());
        assert!(aw.local_addr().unwrap().is_unnamed());
        // Halves of different streams do not reunite; their own do.
        let (ar, bw) = match ar.reunite(bw) {
            Err(weft::net::ReuniteError(r, w)) => (r, w),
            Ok(_) => panic!("halves of two streams reunited"),
        };
        let a = ar.reunite(aw).unwrap();
        // Dropping the write half shut b's write side: a reads EOF.
        drop(bw);
        let mut a = a;
        assert_eq!(a.read(&mut buf).await.unwrap(), 0);
        drop(br);
        // Borrowed halves.
        let (c, mut d) = UnixStream::pair().unwrap();
        let mut c = c;
        {
            let (mut r, mut w) = c.split();
            w.write_all(b"ab").await.unwrap();
            d.read_exact(&mut buf[..2]).await.unwrap();
            d.write_all(b"cd").await.unwrap();
            r.read_exact(&mut buf[..2]).await.unwrap();
            assert_eq!(&buf[..2], b"cd");
        }
        assert!(c.set_read_timeout(Some(Duration::ZERO)).is_err());
        c.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        // The blocking read times out.
        let start = Instant::now();
        let e = std::io::Read::read(&mut &c, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        assert!(start.elapsed() >= Duration::from_millis(25));
        assert!(format!("{c:?}").contains("UnixStream"));
    });
}

#[test]
fn unix_stream_std_round_trip_and_connect_errors() {
    use std::io::{Read as _, Write as _};
    let dir = TempDir::new("stream-std");
    let rt = rt();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (a, b) = rt
        .block_on(async {
            Ok::<_, std::io::Error>((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
        })
        .unwrap();
    (&a).write_all(b"std").unwrap();
    let mut b = b.into_std().unwrap();
    b.set_nonblocking(false).unwrap();
    let mut buf = [0; 3];
    b.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"std");
    // Nobody listens there.
    let missing = dir.path("missing.sock");
    assert!(rt.block_on(UnixStream::connect(&missing)).is_err());
    assert!(on(&rt, || UnixStream::connect_blocking(&missing)).is_err());
    // A listener given back to std still accepts.
    on(&rt, || {
        let l = UnixListener::bind(dir.path("l.sock")).unwrap();
        let l = l.into_std().unwrap();
        let l = UnixListener::from_std(l).unwrap();
        let c = UnixStream::connect_blocking(dir.path("l.sock")).unwrap();
        let (s, _) = l.accept_blocking().unwrap();
        (&c).write_all(b"!").unwrap();
        let mut one = [0; 1];
        (&s).read_exact(&mut one).unwrap();
        assert_eq!(&one, b"!");
    });
}

#[test]
fn unix_listener_accepts_and_its_path_is_cleaned_up() {
    let dir = TempDir::new("listener");
    let path = dir.path("accept.sock");
    let rt = rt();
    on(&rt, || {
        {
            let l = UnixListener::bind(&path).unwrap();
            assert!(path.exists());
            // The path is taken while the file is there.
            assert_eq!(
                UnixListener::bind(&path).unwrap_err().kind(),
                ErrorKind::AddrInUse
            );
            let accepted = weft::spawn(async move {
                let mut peers = Vec::new();
                for _ in 0..3 {
                    let (s, addr) = l.accept().await.unwrap();
                    assert!(addr.is_unnamed());
                    peers.push(s);
                }
                peers.len()
            });
            let clients: Vec<_> = (0..3)
                .map(|_| UnixStream::connect_blocking(&path).unwrap())
                .collect();
            assert_eq!(weft::wait(accepted).unwrap(), 3);
            drop(clients);
        }
        // The listener is gone, its file stays (as std's): remove it and bind again.
        assert!(path.exists());
        std::fs::remove_file(&path).unwrap();
        let l = UnixListener::bind(&path).unwrap();
        let c = std::thread::spawn({
            let path = path.clone();
            let h = rt.handle().clone();
            move || h.block_on(async { UnixStream::connect_blocking(path).map(|_| ()) })
        });
        l.accept_blocking().unwrap();
        c.join().unwrap().unwrap();
        drop(l);
        std::fs::remove_file(&path).unwrap();
    });
    drop(dir);
    assert!(!path.exists());
}

#[test]
fn unix_datagram_round_trips() {
    let dir = TempDir::new("datagram");
    let server_path = dir.path("server.sock");
    let client_path = dir.path("client.sock");
    let rt = rt();
    rt.block_on(async {
        let server = UnixDatagram::bind(&server_path).unwrap();
        let client = UnixDatagram::bind(&client_path).unwrap();
        assert_eq!(
            server.local_addr().unwrap().as_pathname(),
            Some(server_path.as_path())
        );
        let echo = weft::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                let to = from.as_pathname().unwrap().to_owned();
                server.send_to(&buf[..n], to).await.unwrap();
            }
        });
        for i in 0..50u32 {
            client
                .send_to(&i.to_le_bytes(), &server_path)
                .await
                .unwrap();
            let mut back = [0; 4];
            let (n, from) = client.recv_from(&mut back).await.unwrap();
            assert_eq!(n, 4);
            assert_eq!(from.as_pathname(), Some(server_path.as_path()));
            assert_eq!(back, i.to_le_bytes());
        }
        // Connected: send and recv.
        client.connect(&server_path).unwrap();
        client.send(b"conn").await.unwrap();
        let mut back = [0; 4];
        assert_eq!(client.recv(&mut back).await.unwrap(), 4);
        assert_eq!(&back, b"conn");
        client.send(&[]).await.unwrap();
        echo.await.unwrap();
    });
    // Blocking, from a fiber and a plain thread, over a pair.
    on(&rt, || {
        let (a, b) = UnixDatagram::pair().unwrap();
        let f = weft::fiber::spawn(move || {
            let mut buf = [0u8; 16];
            for _ in 0..20 {
                let n = b.recv_blocking(&mut buf).unwrap();
                b.send_blocking(&buf[..n]).unwrap();
            }
        });
        for i in 0..20u8 {
            a.send_blocking(&[i; 3]).unwrap();
            let mut buf = [0; 16];
            let (n, _) = a.recv_from_blocking(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 3]);
        }
        f.join().unwrap();
        // Unbound sockets send to a path; try forms and timeouts.
        let u = UnixDatagram::unbound().unwrap();
        let target = UnixDatagram::bind(dir.path("target.sock")).unwrap();
        u.send_to_blocking(b"u", dir.path("target.sock")).unwrap();
        assert_eq!(u.try_send_to(b"v", dir.path("target.sock")).unwrap(), 1);
        let mut buf = [0; 4];
        let (n, from) = target.recv_from_blocking(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.is_unnamed()), (&b"u"[..], true));
        assert_eq!(target.try_recv_from(&mut buf).unwrap().0, 1);
        target
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        assert_eq!(
            target.recv_blocking(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        let std_sock = target.into_std().unwrap();
        assert_eq!(
            std_sock.local_addr().unwrap().as_pathname(),
            Some(dir.path("target.sock").as_path())
        );
    });
}

#[test]
fn udp_error_event_does_not_spin_a_later_receive() {
    // A connected UDP socket learns of an ICMP "port unreachable" as a socket error,
    // which epoll reports as EPOLLERR: the receive that takes the error fails, and a
    // later one must wait (and time out) instead of seeing "ready" for ever.
    let rt = rt();
    on(&rt, || {
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = closed.local_addr().unwrap();
        drop(closed);
        let s = weft::wait(UdpSocket::bind("127.0.0.1:0")).unwrap();
        weft::wait(s.connect(to)).unwrap();
        s.send_blocking(b"anyone?").unwrap();
        let e = s.recv_blocking(&mut [0; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let s = Arc::new(s);
        let s2 = s.clone();
        std::thread::spawn(move || {
            let _ = tx.send(s2.recv_blocking(&mut [0; 8]).map_err(|e| e.kind()));
        });
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the receive after the error never returned (spinning on the error bit)");
        assert_eq!(r, Err(ErrorKind::WouldBlock));
        // The async form too.
        let r = weft::wait(weft::time::timeout(
            Duration::from_millis(50),
            s.recv(&mut [0; 8]),
        ));
        assert!(r.is_err(), "the async receive completed: {r:?}");
    });
}

/// 300 clients connect to a Unix listener before it accepts any: each connect
/// completes, and the listener then accepts all 300. A nonblocking `connect` to a
/// Unix listener whose queue is full fails at once with `WouldBlock` (TCP's drops
/// the SYN and retries), so the backlog decides whether a burst of clients fails:
/// mio listens with the system's maximum on Linux (`listen(fd, -1)`), where its TCP
/// listener uses std's 128 (hence `TcpListener`'s own backlog).
#[test]
fn a_burst_of_unix_connects_queues_before_any_accept() {
    let dir = TempDir::new("burst");
    let path = dir.path("burst.sock");
    let rt = rt();
    on(&rt, || {
        let l = UnixListener::bind(&path).unwrap();
        let connects: Vec<_> = (0..300)
            .map(|_| weft::spawn(UnixStream::connect(path.clone())))
            .collect();
        let clients: Vec<UnixStream> = connects
            .into_iter()
            .map(|c| weft::wait(c).unwrap().unwrap())
            .collect();
        assert_eq!(clients.len(), 300);
        for _ in 0..clients.len() {
            l.accept_blocking().unwrap();
        }
    });
}
