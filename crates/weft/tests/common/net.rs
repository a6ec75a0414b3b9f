//! Helpers of the network tests: raw socket options and messages that play a remote
//! peer.

use std::io;
use std::os::fd::AsRawFd;

/// Sets `SO_LINGER` to (on, 0 s): closing the socket then sends a reset.
pub fn linger_zero(fd: std::os::fd::RawFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `l` is a valid `linger` for the size passed; `fd` is an open socket.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt(SO_LINGER)");
}

/// Sends `data` on `s` with a descriptor (`s`'s own) attached (`SCM_RIGHTS`).
pub fn send_with_fd(s: &std::os::unix::net::UnixStream, data: &[u8]) -> usize {
    let fd: libc::c_int = s.as_raw_fd();
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero `msghdr` is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which has room for one header and one
    // descriptor (CMSG_SPACE), 8-byte aligned; the header is written in bounds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
    }
    // SAFETY: `msg` and everything it points at (`iov`, `data`, `control`) live across
    // the call.
    let r = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, 0) };
    assert!(r >= 0, "sendmsg: {}", io::Error::last_os_error());
    r as usize
}

/// A connected TCP pair (server side, client side) registered with `rt`, on a loopback
/// address of its own.
pub fn pair(rt: &weft::Runtime) -> (weft::net::TcpStream, weft::net::TcpStream) {
    rt.block_on(async {
        let l = weft::net::TcpListener::bind(super::loopback())
            .await
            .unwrap();
        let c = weft::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (s, _) = l.accept().await.unwrap();
        (s, c)
    })
}

/// A connected pair: a weft stream of `rt` and a plain std stream (the remote peer).
pub fn weft_and_std(rt: &weft::Runtime) -> (weft::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind(super::loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    let w = rt.block_on(async move { weft::net::TcpStream::connect(addr).await.unwrap() });
    let (s, _) = l.accept().unwrap();
    (w, s)
}

/// A folder of its own under the temporary folder (the process id, `tag` and a count in
/// its name), removed with everything in it when dropped: for Unix socket paths.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weft-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, file: &str) -> std::path::PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills a Unix listener's backlog of 1 with non-blocking connects of our own until
/// the kernel says `EAGAIN`; returns the listener and the queued sockets.
pub fn full_backlog(
    path: &std::path::Path,
) -> (std::os::unix::net::UnixListener, Vec<std::os::fd::OwnedFd>) {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    nix::sys::socket::listen(&l, nix::sys::socket::Backlog::new(1).unwrap()).unwrap();
    let mut queued = Vec::new();
    for _ in 0..16 {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK,
            None,
        )
        .unwrap();
        match connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &UnixAddr::new(path).unwrap(),
        ) {
            Ok(()) => queued.push(fd),
            Err(e) => {
                assert_eq!(e, nix::errno::Errno::EAGAIN, "{e}");
                return (l, queued);
            }
        }
    }
    panic!("a backlog of 1 took 16 connections");
}
