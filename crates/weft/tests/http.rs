//! The HTTP examples, each started as a child process on an ephemeral loopback port:
//! 1,000 requests over 10 keep-alive connections with hyper's client on weft tasks
//! (`WeftIo` over weft's `TcpStream`, connections driven through `WeftExecutor`), and
//! pipelined, cut and closing requests in raw bytes. Every wait is bounded.
//!
//! The examples' binaries are looked up next to this test's (`target/<profile>/
//! examples/`), after a `cargo build` of them with the same profile (a no-op when
//! `cargo test` has built them already; `--test http` alone does not).
#![cfg(feature = "hyper")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::rt::Executor;
use weft::hyper::{WeftExecutor, WeftIo};

const CONNECTIONS: usize = 10;
const REQUESTS: usize = 1_000;
const LIMIT: Duration = Duration::from_secs(60);

/// `target/<profile>`, from this test binary's path (`target/<profile>/deps/http-..`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Builds the examples once (same profile as this test) and returns `name`'s binary.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let dir = profile_dir();
    let built = BUILT.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "weft", "--features", "hyper"])
            .args(["--example", "hello_http", "--example", "hello_http_fibers"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("cargo build of the examples: {s}")),
            Err(e) => Err(format!("cannot run cargo: {e}")),
        }
    });
    let path = dir.join("examples").join(name);
    if let Err(e) = built {
        eprintln!("warning: {e}; using the binary already there");
    }
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p weft --features hyper --examples`",
        path.display()
    );
    path
}

/// A server child process; interrupted (then killed, if it lingers) when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(name: &str) -> Server {
        let mut child = Command::new(example(name))
            .arg("127.0.0.1:0")
            .env("WEFT_WORKERS", "2")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // The first line names the bound address; read it on a thread, with a limit.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(LIMIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("{name} printed no address within {LIMIT:?}");
            }
        };
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{name}'s first line is not `listening on ADDR`: {line:?}"));
        Server { child, addr }
    }
}

impl Server {
    /// Ctrl-C: the server must exit by itself, within 5 s, with success.
    fn interrupt(mut self, name: &str) {
        // SAFETY: `kill` has no memory-safety preconditions; the pid is our child's,
        // not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "{name} ended with {status} after Ctrl-C");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{name} did not shut down within 5 s of Ctrl-C");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Ctrl-C first (the examples shut down on it), then SIGKILL after 5 s.
        // SAFETY: `kill` has no memory-safety preconditions; the pid is our child's,
        // not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `requests` GETs over one keep-alive connection; each response must be 200 with
/// the body `Hello, World!`. Returns how many were checked.
async fn client(addr: SocketAddr, requests: usize) -> Result<usize, String> {
    let stream = weft::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(WeftIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    WeftExecutor::new().execute(async move {
        let _ = conn.await;
    });
    for i in 0..requests {
        sender
            .ready()
            .await
            .map_err(|e| format!("request {i}: connection not ready: {e}"))?;
        let req = hyper::Request::get(format!("/{i}"))
            .header(hyper::header::HOST, "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request {i}: {e}"))?;
        if res.status() != hyper::StatusCode::OK {
            return Err(format!("request {i}: status {}", res.status()));
        }
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("request {i}: body: {e}"))?
            .to_bytes();
        if &body[..] != b"Hello, World!" {
            return Err(format!("request {i}: body {body:?}"));
        }
    }
    Ok(requests)
}

/// 1,000 requests over 10 connections, each on its own task.
fn thousand_requests(name: &str) {
    let server = Server::start(name);
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let addr = server.addr;
    let checked = rt.block_on(async move {
        let run = async move {
            let clients: Vec<_> = (0..CONNECTIONS)
                .map(|_| weft::spawn(client(addr, REQUESTS / CONNECTIONS)))
                .collect();
            let mut total = 0;
            for c in clients {
                total += c.await.map_err(|e| e.to_string())??;
            }
            Ok::<_, String>(total)
        };
        weft::time::timeout(LIMIT, run).await
    });
    match checked {
        Ok(Ok(n)) => assert_eq!(n, REQUESTS),
        Ok(Err(e)) => panic!("{name}: {e}"),
        Err(_) => panic!("{name}: the requests did not finish within {LIMIT:?}"),
    }
    drop(rt);
    server.interrupt(name);
}

#[test]
fn hyper_server_answers_1000_requests_on_10_connections() {
    thousand_requests("hello_http");
}

#[test]
fn fiber_server_answers_1000_requests_on_10_connections() {
    thousand_requests("hello_http_fibers");
}

/// Sends `parts` with pauses between them from a plain thread (weft's blocking I/O
/// outside the runtime's workers), then reads until the server closes.
fn raw_exchange(addr: SocketAddr, parts: &[&[u8]]) -> String {
    // Entered: a socket made on a plain thread otherwise registers with the most
    // recently started live runtime, which may be another test's, dropped while this
    // one writes (seen in CI: "the weft runtime this socket belongs to has shut down").
    let rt = weft::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let mut s = weft::net::TcpStream::connect_blocking(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for p in parts {
        if let Err(e) = s.write_all(p) {
            panic!("{addr}: write: {e}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut response = Vec::new();
    s.read_to_end(&mut response)
        .expect("the server closes the connection after the HTTP/1.0 request");
    String::from_utf8(response).unwrap()
}

/// Pipelined requests, one with a body, a head cut in two and an HTTP/1.0 request
/// (without keep-alive: the server closes after it), to both servers.
#[test]
fn pipelined_and_cut_requests() {
    for name in ["hello_http", "hello_http_fibers"] {
        let server = Server::start(name);
        let text = raw_exchange(
            server.addr,
            &[
                b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde",
                b"GET /c HTTP/1.1\r\nHo",
                b"st: x\r\n\r\nGET /d HTTP/1.0\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n",
            ],
        );
        assert_eq!(text.matches(" 200 OK\r\n").count(), 4, "{name}: {text}");
        assert_eq!(text.matches("Hello, World!").count(), 4, "{name}: {text}");
        drop(server);
    }
}

/// The fiber server reads and drops a request body that arrives in pieces, and answers
/// the request after it. (hyper closes a connection whose unread body it cannot drain
/// at once, by design.)
#[test]
fn fiber_server_skips_a_body_cut_across_reads() {
    let server = Server::start("hello_http_fibers");
    let text = raw_exchange(
        server.addr,
        &[
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
            b"def",
            b"ghijGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ],
    );
    assert_eq!(text.matches("Hello, World!").count(), 2, "{text}");
    drop(server);
}

/// `Connection: close` on HTTP/1.1 ends the connection after its response; an HTTP/1.0
/// request with `Connection: keep-alive` keeps it open.
#[test]
fn connection_close_and_http10_keep_alive() {
    for name in ["hello_http", "hello_http_fibers"] {
        let server = Server::start(name);
        let text = raw_exchange(
            server.addr,
            &[b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"],
        );
        assert_eq!(text.matches("Hello, World!").count(), 2, "{name}: {text}");
        assert!(
            text.to_ascii_lowercase().contains("connection: keep-alive"),
            "{name}: {text}"
        );
        drop(server);
    }
}

/// hyper's header-read timeout runs on weft's timer wheel through `WeftTimer`: it is
/// a pending weft timer while the head is incomplete, and it closes the connection.
#[test]
fn header_read_timeout_on_weft_timer() {
    use std::convert::Infallible;
    use weft::hyper::WeftTimer;

    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let listener = rt
        .block_on(weft::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let timers_before = rt.stats().timers_pending;
    let server = rt.spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(hyper::Response::new(Empty::<Bytes>::new()))
        });
        hyper::server::conn::http1::Builder::new()
            .timer(WeftTimer::new())
            .header_read_timeout(Duration::from_millis(300))
            .serve_connection(WeftIo::new(stream), service)
            .await
    });
    let mut c = weft::net::TcpStream::connect_blocking(addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rt.stats().timers_pending, timers_before + 1);
    let start = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let err = server.join().unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(rt.stats().timers_pending, timers_before);
}
