//! HTTP/1.1 "Hello, World!" from fibers in plain blocking style: one fiber per
//! connection reads with `std::io::Read`, parses request heads with `httparse` and
//! answers with one `std::io::Write::write_all` per batch of requests. Each blocking
//! call suspends the fiber, not its worker.
//!
//! ```text
//! cargo run --release -p weft --example hello_http_fibers [ADDR]
//! ```
//!
//! `ADDR` (or `WEFT_HTTP_ADDR`, default `127.0.0.1:3000`) is the address to bind;
//! `WEFT_WORKERS` sets the worker count. The first line on stdout is
//! `listening on ADDR` with the bound address (so a port of 0 can be read back).
//! Ctrl-C shuts the server down.
//!
//! Pipelined requests are answered in order, all those complete in one read with one
//! write; a request cut across reads waits for its rest. Connections are kept alive
//! unless the request says `Connection: close`, or is HTTP/1.0 without
//! `Connection: keep-alive`. Request bodies (`Content-Length`) are read and ignored;
//! chunked request bodies are refused (501), as are heads over 64 KiB (431).

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weft::net::{TcpListener, TcpStream};

/// The address to bind: the first argument, else `WEFT_HTTP_ADDR`, else port 3000.
fn address() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("WEFT_HTTP_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:3000".to_string())
}

const BODY: &[u8] = b"Hello, World!";
/// The read buffer's first size, and the most a request head may take.
const INITIAL_BUFFER: usize = 8 * 1024;
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const HEAD_TOO_LARGE: &[u8] =
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// What the response says about the connection.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Persist {
    /// HTTP/1.1 keep-alive: nothing to say.
    Default,
    /// An HTTP/1.0 client that asked for keep-alive: `connection: keep-alive`.
    KeepAlive,
    /// The last response on this connection: `connection: close`.
    Close,
}

/// One request head parsed from the front of the buffer.
enum Parsed {
    /// Not all of the head is here yet.
    Partial,
    Request {
        head_len: usize,
        body_len: usize,
        persist: Persist,
    },
    /// Refused with this response; the connection closes after it.
    Refused(&'static [u8]),
}

fn parse(data: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(data) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Refused(HEAD_TOO_LARGE),
        Err(_) => return Parsed::Refused(BAD_REQUEST),
    };
    let (mut close, mut keep_alive) = (false, false);
    let mut body_len: Option<usize> = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let len = std::str::from_utf8(h.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok());
            match (len, body_len) {
                (Some(n), None) => body_len = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Parsed::Refused(BAD_REQUEST),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Refused(NOT_IMPLEMENTED);
        }
    }
    let persist = match req.version {
        Some(1) if !close => Persist::Default,
        Some(0) if keep_alive && !close => Persist::KeepAlive,
        _ => Persist::Close,
    };
    Parsed::Request {
        head_len,
        body_len: body_len.unwrap_or(0),
        persist,
    }
}

/// `Date` header text, recomputed when the second changes.
struct Date {
    secs: u64,
    text: [u8; 29],
}

impl Date {
    fn new() -> Date {
        let mut d = Date {
            secs: u64::MAX,
            text: [b' '; 29],
        };
        d.refresh();
        d
    }

    fn refresh(&mut self) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs != self.secs {
            self.secs = secs;
            self.text = imf_fixdate(secs);
        }
    }
}

/// `secs` after the Unix epoch as `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(secs: u64) -> [u8; 29] {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days (Howard Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let s = format!(
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    );
    let mut out = [b' '; 29];
    out.copy_from_slice(&s.as_bytes()[..29]);
    out
}

/// Appends the hello response.
fn respond(out: &mut Vec<u8>, date: &Date, persist: Persist) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\n");
    match persist {
        Persist::Default => {}
        Persist::KeepAlive => out.extend_from_slice(b"connection: keep-alive\r\n"),
        Persist::Close => out.extend_from_slice(b"connection: close\r\n"),
    }
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(&date.text);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(BODY);
}

/// Serves one connection until the client closes it or a response closes it.
fn serve(mut stream: TcpStream) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; INITIAL_BUFFER];
    let mut filled = 0;
    // Bytes of the last request's body still to come (read and dropped).
    let mut skip = 0usize;
    let mut out = Vec::with_capacity(1024);
    let mut date = Date::new();
    loop {
        if filled == buf.len() {
            if buf.len() >= MAX_HEAD {
                stream.write_all(HEAD_TOO_LARGE)?;
                return close(stream);
            }
            buf.resize(buf.len() * 2, 0);
        }
        let n = stream.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        // Answer every complete request in the buffer.
        let mut pos = 0;
        let mut closing = false;
        date.refresh();
        loop {
            let dropped = skip.min(filled - pos);
            pos += dropped;
            skip -= dropped;
            if pos == filled {
                break;
            }
            match parse(&buf[pos..filled]) {
                Parsed::Partial => break,
                Parsed::Request {
                    head_len,
                    body_len,
                    persist,
                } => {
                    respond(&mut out, &date, persist);
                    pos += head_len;
                    skip = body_len;
                    if persist == Persist::Close {
                        closing = true;
                        break;
                    }
                }
                Parsed::Refused(response) => {
                    out.extend_from_slice(response);
                    closing = true;
                    break;
                }
            }
        }
        // Keep what is left (the start of the next request) at the front.
        buf.copy_within(pos..filled, 0);
        filled -= pos;
        if !out.is_empty() {
            stream.write_all(&out)?;
            out.clear();
        }
        if closing {
            return close(stream);
        }
    }
}

/// Closes after the last response: shuts the write side, then reads until the client
/// closes too (for at most a second), so that unread requests do not make the kernel
/// reset the connection before the client has read the response.
fn close(mut stream: TcpStream) -> io::Result<()> {
    stream.shutdown(Shutdown::Write)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

/// Accepts connections for ever, one fiber each.
fn accept_loop(listener: &TcpListener) -> io::Result<()> {
    loop {
        match listener.accept_blocking() {
            Ok((stream, _)) => drop(weft::fiber::spawn(move || {
                if let Err(e) = serve(stream) {
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                            | io::ErrorKind::ConnectionAborted
                    ) {
                        eprintln!("connection error: {e}");
                    }
                }
            })),
            // The peer gave up before we took it, or we ran out of descriptors for a
            // moment: keep serving the others.
            Err(e) if transient(&e) => weft::fiber::sleep(Duration::from_millis(10)),
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

/// Blocks until Ctrl-C (weft's handler stays installed: SIGINT no longer kills the
/// process, the server shuts down instead).
fn ctrl_c_blocking() -> io::Result<()> {
    weft::signal::ctrl_c_blocking()
}

fn main() -> io::Result<()> {
    // `WEFT_WORKERS` is read by the builder.
    let rt = weft::Runtime::new()?;
    let listener = rt.block_on(TcpListener::bind(address()))?;
    println!("listening on {}", listener.local_addr()?);
    let _acceptor = weft::fiber::spawn(move || {
        if let Err(e) = accept_loop(&listener) {
            eprintln!("accept failed: {e}");
            std::process::exit(1);
        }
    });
    ctrl_c_blocking()?;
    eprintln!("shutting down");
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates() {
        assert_eq!(&super::imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            &super::imf_fixdate(784_111_777),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            &super::imf_fixdate(951_782_400),
            b"Tue, 29 Feb 2000 00:00:00 GMT"
        );
    }
}
