//! HTTP/1.1 "Hello, World!" with hyper on weft tasks: an accept loop that spawns one
//! task per connection, each serving its connection with `hyper::server::conn::http1`
//! (keep-alive on, header-read timeout on weft's timer wheel through `WeftTimer`).
//!
//! ```text
//! cargo run --release -p weft --features hyper --example hello_http [ADDR]
//! ```
//!
//! `ADDR` (or `WEFT_HTTP_ADDR`, default `127.0.0.1:3000`) is the address to bind;
//! `WEFT_WORKERS` sets the worker count. The first line on stdout is
//! `listening on ADDR` with the bound address (so a port of 0 can be read back).
//! Ctrl-C shuts the server down.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use weft::hyper::{WeftIo, WeftTimer};
use weft::net::{TcpListener, TcpStream};

/// The address to bind: the first argument, else `WEFT_HTTP_ADDR`, else port 3000.
fn address() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("WEFT_HTTP_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:3000".to_string())
}

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

async fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let conn = http1::Builder::new()
        .keep_alive(true)
        .timer(WeftTimer::new())
        .serve_connection(WeftIo::new(stream), service_fn(hello));
    if let Err(e) = conn.await {
        if !e.is_incomplete_message() {
            eprintln!("connection error: {e}");
        }
    }
}

/// Accepts connections for ever, one task each.
async fn accept_loop(listener: TcpListener) -> io::Result<()> {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => drop(weft::spawn(serve(stream))),
            // The peer gave up before we took it, or we ran out of descriptors for a
            // moment: keep serving the others.
            Err(e) if transient(&e) => weft::time::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(e),
        }
    }
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

/// Resolves on Ctrl-C (weft's handler stays installed: SIGINT no longer kills the
/// process, the server shuts down instead).
async fn ctrl_c() -> io::Result<()> {
    weft::signal::ctrl_c().await
}

fn main() -> io::Result<()> {
    // `WEFT_WORKERS` is read by the builder.
    let rt = weft::Runtime::new()?;
    let listener = rt.block_on(TcpListener::bind(address()))?;
    println!("listening on {}", listener.local_addr()?);
    let server = rt.spawn(accept_loop(listener));
    rt.block_on(async {
        // Whichever ends first: a failed accept loop, or Ctrl-C.
        let mut server = std::pin::pin!(server);
        let mut signal = std::pin::pin!(ctrl_c());
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(r) = server.as_mut().poll(cx) {
                return std::task::Poll::Ready(
                    r.map_err(|e| io::Error::other(e.to_string()))
                        .and_then(|r| r),
                );
            }
            signal.as_mut().poll(cx)
        })
        .await
    })?;
    eprintln!("shutting down");
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
