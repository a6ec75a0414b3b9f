//! First checks of the TCP sockets from tasks, fibers and plain threads.

use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};

#[test]
fn echo_between_tasks() {
    use weft::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    rt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
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
        let mut c = TcpStream::connect(addr).await.unwrap();
        for i in 0..100u32 {
            let msg = vec![i as u8; 1000 + i as usize * 100];
            c.write_all(&msg).await.unwrap();
            let mut back = vec![0; msg.len()];
            c.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg);
        }
        weft::io::AsyncWriteExt::shutdown(&mut c).await.unwrap();
        server.await.unwrap();
    });
}

#[test]
fn echo_fiber_server_thread_client() {
    use std::io::{Read, Write};
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = l.local_addr().unwrap();
    // Inside `block_on`, so that the fiber and the client's socket are this runtime's,
    // not those of whichever runtime another test started last (and may drop).
    rt.block_on(async {
        let h = weft::fiber::spawn(move || {
            let (mut s, _) = l.accept_blocking().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
        });
        let mut c = TcpStream::connect_blocking(addr).unwrap();
        for i in 0..200u32 {
            let msg = i.to_le_bytes();
            c.write_all(&msg).unwrap();
            let mut back = [0; 4];
            c.read_exact(&mut back).unwrap();
            assert_eq!(back, msg);
        }
        c.shutdown(std::net::Shutdown::Write).unwrap();
        h.join().unwrap();
    });
    drop(rt);
}

#[test]
fn read_timeout_is_would_block() {
    use std::io::Read;
    let rt = weft::Runtime::new().unwrap();
    let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    // Inside `block_on`: the client's socket is this runtime's (see above).
    let mut c = rt
        .block_on(async { TcpStream::connect_blocking(l.local_addr().unwrap()) })
        .unwrap();
    let (_s, _) = l.accept_blocking().unwrap();
    assert!(c.set_read_timeout(Some(Duration::ZERO)).is_err());
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let start = Instant::now();
    let e = c.read(&mut [0; 8]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    assert!(start.elapsed() >= Duration::from_millis(45));
}

#[test]
fn refused_and_runtime_drop() {
    let rt = weft::Runtime::new().unwrap();
    // A port nobody listens on: bind, take the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = rt.block_on(TcpStream::connect(port)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let t = std::thread::spawn(move || l.accept_blocking().map(|_| ()));
    std::thread::sleep(Duration::from_millis(50));
    drop(rt);
    assert!(t.join().unwrap().is_err());
}
