//! Review s33, from safe code only: the hyper adapters (`hyper/io.rs`, `executor.rs`,
//! `timer.rs`, behind the `hyper` feature), the `weft::io` extension futures, the
//! `SIGINT` machinery (`signal/mod.rs`) and the sockets' blocking forms with their read
//! and write timeouts (`net/timeouts.rs`, `net/evented.rs`) from a fiber, a task and a
//! plain thread, with sockets moved between those and runtimes dropped under them.
//!
//! Every test runs under a watchdog (a hang fails it with "hang"), every loop is
//! bounded, traffic goes to loopback addresses only. The signal tests install weft's
//! process-wide `SIGINT` handler, so each runs in a child process of its own (this
//! binary's `child_process_entry`, see `common::child`); the parent never raises a
//! signal.
//!
//! Run: `cargo test -p weft --features hyper --test review_s33` (without the feature
//! the hyper section is left out).
//!
//! Findings (each failed on the code reviewed, 9d1a94d; fixed since):
//! * `runtime_drop_with_a_task_in_ctrl_c_blocking`: a task blocked in
//!   `signal::ctrl_c_blocking` (its worker helping) kept its runtime's drop waiting
//!   until the next SIGINT: the shutdown ended socket waits (`shutdown_io`) but nothing
//!   ended a signal wait, and `weft::wait` on a worker goes on until its future
//!   completes. Now a signal wait ends with an error when the runtime it began on
//!   shuts down (`runtime::on_every_shutdown`).
//! * `plain_thread_socket_timeout_while_every_worker_is_busy`: while every worker of a
//!   runtime was in a long poll (and no worker of any pool parked), nothing fired its
//!   timers or read its sockets: a plain thread's 100 ms socket read timeout, and
//!   data sent to it, waited the 1.2 s of the polls. Now sysmon fires and polls them
//!   itself when it has nobody to nudge (`nudge_for_the_drivers`).
//! * `read_to_end_future_leaked_leaves_the_data_then_zeroes`: a pending `read_to_end`
//!   future that is leaked leaves the vector as long as its capacity, the bytes read
//!   followed by zeroes (low severity): kept and documented.
//!
//! Undocumented behaviour, now documented and pinned: `read_to_string` dropped midway
//! or ended by an I/O error loses the valid bytes it consumed (`read_to_end` and std
//! keep them); `read_exact` and `write_all` are not cancel safe either.
//!
//! Nothing unsound was found in `WeftIo`'s use of hyper's `ReadBufCursor`: short,
//! empty, failed, pending, scribbling, over-reporting and huge reads never expose a
//! byte that was not reported (an over-report panics before the cursor moves).

// Tasks hand futures out on purpose.
#![allow(clippy::async_yields_async)]

mod common;
use common::net::weft_and_std;
use common::signal::{install_handler, raise, raise_until, spawn_ctrl_c};

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, thread_within, watchdog};
use weft::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weft::net::{TcpStream, UdpSocket, UnixStream};
use weft::Runtime;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn rt(workers: usize) -> Runtime {
    common::runtime(workers, 0)
}

/// Byte `i` of a test stream.
fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| (i % 251) as u8).collect()
}

/// A connected TCP pair on a loopback address of its own (server side, client side).
fn tcp_pair(rt: &Runtime) -> (TcpStream, TcpStream) {
    common::net::pair(rt)
}

/// Shrinks a socket's send or receive buffer (`opt`: `SO_SNDBUF` / `SO_RCVBUF`).
fn set_buf(fd: std::os::fd::RawFd, opt: libc::c_int, bytes: libc::c_int) {
    // SAFETY: `bytes` is a valid `c_int` for the size passed; `fd` is an open socket.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt");
}

/// What a scripted reader does on its next poll.
#[derive(Debug, Clone)]
enum Step {
    /// Hands out up to this many bytes of its data.
    Data(Vec<u8>),
    /// End of stream (Ok(0)).
    Eof,
    /// An error of this kind.
    Fail(io::ErrorKind),
    /// Pending, waking itself.
    Pending,
    /// Writes `fill` over the whole buffer but reports only `n` bytes.
    Scribble { n: usize, fill: u8 },
    /// Reports `extra` bytes more than the buffer holds (a broken reader).
    OverReport { extra: usize },
}

/// A reader that follows a script, one step per poll (a `Data` step longer than the
/// buffer stays at the front with what is left), and records the length of every
/// buffer it was given and whether every byte of it was zero.
struct Script {
    steps: std::collections::VecDeque<Step>,
    seen: Vec<(usize, bool)>,
}

impl Script {
    fn new(steps: impl IntoIterator<Item = Step>) -> Script {
        Script {
            steps: steps.into_iter().collect(),
            seen: Vec::new(),
        }
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let zeroed = buf.iter().all(|&b| b == 0);
        self.seen.push((buf.len(), zeroed));
        match self.steps.pop_front() {
            None | Some(Step::Eof) => Poll::Ready(Ok(0)),
            Some(Step::Data(mut d)) => {
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                if n < d.len() {
                    d.drain(..n);
                    self.steps.push_front(Step::Data(d));
                }
                Poll::Ready(Ok(n))
            }
            Some(Step::Fail(k)) => Poll::Ready(Err(io::Error::new(k, "scripted"))),
            Some(Step::Pending) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(Step::Scribble { n, fill }) => {
                buf.fill(fill);
                Poll::Ready(Ok(n.min(buf.len())))
            }
            Some(Step::OverReport { extra }) => {
                buf.fill(b'!');
                Poll::Ready(Ok(buf.len() + extra))
            }
        }
    }
}

/// What a scripted writer does on its next poll.
#[derive(Debug, Clone, Copy)]
enum WStep {
    /// Takes up to this many bytes.
    Take(usize),
    /// Takes nothing: Ok(0).
    Zero,
    Fail(io::ErrorKind),
    Pending,
}

/// A writer that follows a script (taking everything once it runs out), keeping what
/// it took.
struct WScript {
    steps: std::collections::VecDeque<WStep>,
    out: Vec<u8>,
    flushed: usize,
    closed: usize,
}

impl WScript {
    fn new(steps: impl IntoIterator<Item = WStep>) -> WScript {
        WScript {
            steps: steps.into_iter().collect(),
            out: Vec::new(),
            flushed: 0,
            closed: 0,
        }
    }
}

impl AsyncWrite for WScript {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.steps.pop_front() {
            None => {
                self.out.extend_from_slice(buf);
                Poll::Ready(Ok(buf.len()))
            }
            Some(WStep::Take(n)) => {
                let n = n.min(buf.len());
                self.out.extend_from_slice(&buf[..n]);
                Poll::Ready(Ok(n))
            }
            Some(WStep::Zero) => Poll::Ready(Ok(0)),
            Some(WStep::Fail(k)) => Poll::Ready(Err(io::Error::new(k, "scripted"))),
            Some(WStep::Pending) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flushed += 1;
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.closed += 1;
        Poll::Ready(Ok(()))
    }
}

/// Polls `f` until ready, at most `limit` times, with a no-op waker.
fn poll_to_end<F: Future>(f: Pin<&mut F>, limit: usize) -> F::Output {
    let mut f = f;
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..limit {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("hang: not ready after {limit} polls");
}

// ---------------------------------------------------------------------------------
// 1. weft::io extension futures
// ---------------------------------------------------------------------------------

/// `read_to_string` over a reader that hands out one byte per poll, with pending polls
/// in between: every multi-byte character is split across reads, and comes out whole.
/// Bytes that are not UTF-8, split the same way, fail with `InvalidData` and leave the
/// string as it was (documented).
#[test]
fn read_to_string_with_characters_split_across_reads() {
    watchdog(10, || {
        let text = "héllo — 日本語 🎉 ok";
        let mut steps = Vec::new();
        for b in text.bytes() {
            steps.push(Step::Data(vec![b]));
            steps.push(Step::Pending);
        }
        steps.push(Step::Eof);
        let mut r = Script::new(steps);
        let mut s = String::from("prefix:");
        let n = poll_to_end(pin!(r.read_to_string(&mut s)), 10_000).unwrap();
        assert_eq!(n, text.len());
        assert_eq!(s, format!("prefix:{text}"));

        // An invalid sequence: a lead byte of a 3-byte character, then ASCII, split.
        let bad = [b'a', 0xE6, 0x97, b'b', b'c'];
        let mut steps: Vec<Step> = bad.iter().map(|&b| Step::Data(vec![b])).collect();
        steps.push(Step::Eof);
        let mut r = Script::new(steps);
        let mut s = String::from("keep");
        let e = poll_to_end(pin!(r.read_to_string(&mut s)), 1000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            s, "keep",
            "nothing is appended when the bytes are not UTF-8"
        );

        // A character cut by the end of the stream: invalid too.
        let mut r = Script::new([Step::Data("é".as_bytes()[..1].to_vec()), Step::Eof]);
        let mut s = String::new();
        let e = poll_to_end(pin!(r.read_to_string(&mut s)), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(s.is_empty());
    });
}

/// `read_to_end` over short reads, pending polls, `Interrupted` errors and a reader
/// that scribbles over its whole buffer but reports fewer bytes: the vector ends with
/// exactly the bytes reported, after what it held before, and none of the scribble.
/// A reader reporting more than it was given is clamped, not trusted.
#[test]
fn read_to_end_keeps_only_what_was_reported() {
    watchdog(10, || {
        let mut r = Script::new([
            Step::Data(b"abc".to_vec()),
            Step::Pending,
            Step::Fail(io::ErrorKind::Interrupted),
            Step::Scribble { n: 2, fill: b'#' },
            Step::Data(b"def".to_vec()),
            Step::Scribble { n: 0, fill: b'@' },
        ]);
        let mut v = b"pre".to_vec();
        let n = poll_to_end(pin!(r.read_to_end(&mut v)), 100).unwrap();
        assert_eq!(n, 3 + 2 + 3);
        // (The scribble step with n = 0 is the end of the stream: its '@'s are not
        // kept, nor anything past the 2 bytes of the first scribble.)
        assert_eq!(v, b"preabc##def");

        // Reported more than the room: clamped to the room.
        let mut r = Script::new([Step::OverReport { extra: 1000 }, Step::Eof]);
        let mut v = Vec::with_capacity(100);
        let n = poll_to_end(pin!(r.read_to_end(&mut v)), 100).unwrap();
        assert_eq!(n, v.len());
        assert!(v.iter().all(|&b| b == b'!'), "only what the reader wrote");
    });
}

/// A `read_to_end` dropped while pending keeps the bytes read so far, and only them
/// (no zeroed spare capacity left in the vector), as documented.
#[test]
fn read_to_end_dropped_midway_keeps_exactly_what_was_read() {
    watchdog(10, || {
        let mut r = Script::new([
            Step::Data(pattern(0, 5000)),
            Step::Pending,
            Step::Data(pattern(5000, 100)),
        ]);
        let mut v = b"xy".to_vec();
        {
            let mut f = pin!(r.read_to_end(&mut v));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(f.as_mut().poll(&mut cx).is_pending());
        }
        let mut want = b"xy".to_vec();
        want.extend(pattern(0, 5000));
        assert_eq!(v.len(), want.len());
        assert_eq!(v, want);
        // The rest is read by the next call, nothing lost.
        let n = poll_to_end(pin!(r.read_to_end(&mut v)), 100).unwrap();
        assert_eq!(n, 100);
        want.extend(pattern(5000, 100));
        assert_eq!(v, want);
    });
}

/// A `read_to_end` future leaked (`mem::forget`, safe) while pending: found in review
/// that the vector is left at its capacity, the bytes read followed by zeroes
/// (`poll_to_end` lengthens it before each read so that each byte of new capacity is
/// zeroed once, and the future's `Drop` truncates it). Kept (truncating at every
/// `Pending` made a read in small pieces quadratic) and documented on `read_to_end`:
/// the data comes first, whole, and nothing but zeroes follows it.
#[test]
fn read_to_end_future_leaked_leaves_the_data_then_zeroes() {
    watchdog(10, || {
        let mut r = Script::new([Step::Data(b"abc".to_vec()), Step::Pending]);
        let mut v = b"xy".to_vec();
        let mut f = Box::pin(r.read_to_end(&mut v));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        std::mem::forget(f);
        assert!(v.len() >= 5, "the data is gone: {v:?}");
        assert_eq!(&v[..5], b"xyabc");
        assert!(v[5..].iter().all(|&b| b == 0), "{v:?}");
    });
}

/// `read_to_string` dropped while pending, or ended by an I/O error, after it consumed
/// valid UTF-8 from the stream: those bytes are gone from the stream *and* not in the
/// string (unlike `read_to_end`, which keeps them, and std's `read_to_string`, which
/// keeps valid UTF-8 read before an error). Found undocumented in review; now
/// documented ("not cancel safe", as tokio's), and this test pins it.
#[test]
fn read_to_string_dropped_or_failed_midway_loses_consumed_bytes() {
    watchdog(10, || {
        // Dropped midway.
        let mut r = Script::new([
            Step::Data(b"hello ".to_vec()),
            Step::Pending,
            Step::Data(b"world".to_vec()),
        ]);
        let mut s = String::new();
        {
            let mut f = pin!(r.read_to_string(&mut s));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(f.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(s, "", "the 6 bytes consumed are not in the string");
        let mut rest = String::new();
        poll_to_end(pin!(r.read_to_string(&mut rest)), 100).unwrap();
        assert_eq!(rest, "world", "and are gone from the stream");

        // Ended by an error.
        let mut r = Script::new([
            Step::Data(b"valid".to_vec()),
            Step::Fail(io::ErrorKind::ConnectionReset),
        ]);
        let mut s = String::new();
        let e = poll_to_end(pin!(r.read_to_string(&mut s)), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(s, "", "valid bytes read before the error are dropped");
        // std keeps them.
        struct Std(Option<&'static [u8]>);
        impl Read for Std {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                match self.0.take() {
                    Some(d) => {
                        b[..d.len()].copy_from_slice(d);
                        Ok(d.len())
                    }
                    None => Err(io::ErrorKind::ConnectionReset.into()),
                }
            }
        }
        let mut s = String::new();
        assert!(Std(Some(b"valid")).read_to_string(&mut s).is_err());
        assert_eq!(s, "valid");
    });
}

/// `read_exact` over short reads, pending polls and `Interrupted`: fills the buffer in
/// order; an end of stream midway is `UnexpectedEof` with the part read left in the
/// buffer; an empty buffer reads nothing. A reader that over-reports does not make it
/// panic or read past the buffer.
#[test]
fn read_exact_in_pieces_eof_and_over_report() {
    watchdog(10, || {
        let data = pattern(0, 40);
        let mut steps = Vec::new();
        for c in data.chunks(7) {
            steps.push(Step::Data(c.to_vec()));
            steps.push(Step::Pending);
            steps.push(Step::Fail(io::ErrorKind::Interrupted));
        }
        let mut r = Script::new(steps);
        let mut buf = [0u8; 40];
        assert_eq!(poll_to_end(pin!(r.read_exact(&mut buf)), 1000).unwrap(), 40);
        assert_eq!(&buf[..], &data[..]);

        let mut r = Script::new([Step::Data(b"abc".to_vec()), Step::Eof]);
        let mut buf = [0u8; 8];
        let e = poll_to_end(pin!(r.read_exact(&mut buf)), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(&buf[..3], b"abc");

        let mut r = Script::new([Step::Fail(io::ErrorKind::Other)]);
        assert_eq!(poll_to_end(pin!(r.read_exact(&mut [])), 10).unwrap(), 0);
        assert!(r.seen.is_empty(), "an empty read_exact reads nothing");

        let mut r = Script::new([Step::OverReport { extra: 5 }]);
        let mut buf = [0u8; 8];
        assert_eq!(poll_to_end(pin!(r.read_exact(&mut buf)), 10).unwrap(), 8);
    });
}

/// `write_all` over partial writes, pending polls and `Interrupted`: the writer gets
/// every byte exactly once, in order; a writer that takes nothing (Ok(0)) ends it with
/// `WriteZero` after the bytes it did take; `flush` and `shutdown` reach the writer.
#[test]
fn write_all_partial_pending_zero_flush_shutdown() {
    watchdog(10, || {
        let data = pattern(0, 1000);
        let mut steps = Vec::new();
        for i in 0..50 {
            steps.push(WStep::Take(1 + i % 13));
            if i % 3 == 0 {
                steps.push(WStep::Pending);
            }
            if i % 5 == 0 {
                steps.push(WStep::Fail(io::ErrorKind::Interrupted));
            }
        }
        let mut w = WScript::new(steps);
        poll_to_end(pin!(w.write_all(&data)), 10_000).unwrap();
        assert_eq!(w.out, data, "every byte once, in order");
        poll_to_end(pin!(w.flush()), 10).unwrap();
        poll_to_end(pin!(w.shutdown()), 10).unwrap();
        assert_eq!((w.flushed, w.closed), (1, 1));

        let mut w = WScript::new([WStep::Take(4), WStep::Zero]);
        let e = poll_to_end(pin!(w.write_all(b"0123456789")), 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
        assert_eq!(w.out, b"0123");

        let mut w = WScript::new([WStep::Take(2), WStep::Fail(io::ErrorKind::BrokenPipe)]);
        let e = poll_to_end(pin!(w.write_all(b"abcdef")), 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(w.out, b"ab");

        // An empty write_all writes nothing.
        let mut w = WScript::new([WStep::Fail(io::ErrorKind::Other)]);
        poll_to_end(pin!(w.write_all(b"")), 10).unwrap();
        assert_eq!(w.steps.len(), 1);
    });
}

/// A `write_all` dropped while pending: what the writer took stays taken, and a second
/// `write_all` of the rest completes the stream without duplicates (the caller cannot
/// learn how much went, so in general this is documented-as-not-cancel-safe data; here
/// the test knows).
#[test]
fn write_all_dropped_midway_then_resumed() {
    watchdog(10, || {
        let mut w = WScript::new([WStep::Take(3), WStep::Pending]);
        {
            let mut f = pin!(w.write_all(b"abcdefgh"));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(f.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(w.out, b"abc");
        poll_to_end(pin!(w.write_all(b"defgh")), 10).unwrap();
        assert_eq!(w.out, b"abcdefgh");
    });
}

/// The extension futures over real sockets: a 1 MiB stream written by a plain thread in
/// uneven pieces, read with `read_exact` then `read_to_end` in a task (short reads,
/// pending polls); `shutdown` twice, and after the peer is gone, is not an error; the
/// peer reads end of stream after it.
#[test]
fn ext_futures_over_tcp() {
    watchdog(20, || {
        let rt = rt(2);
        let (mut w, mut peer) = weft_and_std(&rt);
        const N: usize = 1 << 20;
        let writer = std::thread::spawn(move || {
            let data = pattern(0, N);
            let mut at = 0;
            let mut k = 1;
            while at < N {
                let len = (k * 7919 % 65_536 + 1).min(N - at);
                peer.write_all(&data[at..at + len]).unwrap();
                at += len;
                k += 1;
            }
            peer.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            peer.read_to_end(&mut back).unwrap();
            back
        });
        let got = rt.block_on(async move {
            let mut head = [0u8; 1000];
            AsyncReadExt::read_exact(&mut w, &mut head).await.unwrap();
            let mut rest = head.to_vec();
            let n = AsyncReadExt::read_to_end(&mut w, &mut rest).await.unwrap();
            assert_eq!(n, N - 1000);
            AsyncWriteExt::write_all(&mut w, b"done").await.unwrap();
            AsyncWriteExt::flush(&mut w).await.unwrap();
            AsyncWriteExt::shutdown(&mut w).await.unwrap();
            AsyncWriteExt::shutdown(&mut w).await.unwrap();
            rest
        });
        assert!(got == pattern(0, N), "the stream came through intact");
        assert_eq!(thread_within(writer, 10), b"done");
    });
}

// ---------------------------------------------------------------------------------
// 2. SIGINT: every case in a child process of its own
// ---------------------------------------------------------------------------------

const CHILD: &str = "WEFT_S33_CHILD";

/// Not a real test unless run as a child: runs the case named by `CHILD`.
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "many_waiters" => child_many_waiters(),
        "runtime_dropped_under_waiters" => child_runtime_dropped_under_waiters(),
        "blocking_waiter_in_task_vs_drop" => child_blocking_waiter_in_task_vs_drop(),
        "storm_vs_io" => child_storm_vs_io(),
        "waiter_churn" => child_waiter_churn(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str, secs: u64) -> common::child::Output {
    common::child::run_case(CHILD, case, Duration::from_secs(secs))
}

fn wait_flag(flag: &AtomicBool) {
    common::wait_until("a waiter was polled", || flag.load(SeqCst));
}

/// Many waiters at once, in every context: 24 tasks awaiting `ctrl_c`, 6 fibers and 3
/// plain threads in `ctrl_c_blocking`, 2 tasks in `ctrl_c_blocking` (their workers
/// help meanwhile), 8 task waiters aborted and 8 timed out before any signal. SIGINT
/// until every live waiter is done: all complete with `Ok`.
#[test]
fn sigint_completes_many_waiters_in_every_context() {
    run_child("many_waiters", 20).assert_finished();
}

fn child_many_waiters() {
    install_handler();
    let rt = rt(2);
    let tasks: Vec<_> = (0..24).map(|_| spawn_ctrl_c(&rt)).collect();
    for (_, p) in &tasks {
        wait_flag(p);
    }
    let aborted: Vec<_> = (0..8).map(|_| spawn_ctrl_c(&rt)).collect();
    for (h, p) in &aborted {
        wait_flag(p);
        h.abort();
    }
    let timed: Vec<_> = (0..8)
        .map(|_| {
            rt.spawn(weft::time::timeout(
                Duration::from_millis(5),
                weft::signal::ctrl_c(),
            ))
        })
        .collect();
    for h in timed {
        assert!(
            join_within(h, 10).unwrap().is_err(),
            "timed out, no signal yet"
        );
    }
    for (h, _) in aborted {
        assert!(join_within(h, 10).unwrap_err().is_cancelled());
    }
    let fibers: Vec<_> = (0..6)
        .map(|_| fiber_on(&rt, weft::signal::ctrl_c_blocking))
        .collect();
    let threads: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(weft::signal::ctrl_c_blocking))
        .collect();
    let blocking_tasks: Vec<_> = (0..2)
        .map(|_| {
            rt.spawn(async {
                weft::signal::ctrl_c_blocking()?;
                // The worker can still run things after its wait.
                Ok::<_, io::Error>(weft::spawn(async { 7 }).await.unwrap())
            })
        })
        .collect();
    raise_until("the waiters", || {
        tasks.iter().all(|(h, _)| h.is_finished())
            && fibers.iter().all(|h| h.is_finished())
            && threads.iter().all(|h| h.is_finished())
            && blocking_tasks.iter().all(|h| h.is_finished())
    });
    for (h, _) in tasks {
        join_within(h, 5).unwrap().unwrap();
    }
    for h in fibers {
        join_within(h, 5).unwrap().unwrap();
    }
    for h in threads {
        thread_within(h, 5).unwrap();
    }
    for h in blocking_tasks {
        assert_eq!(join_within(h, 5).unwrap().unwrap(), 7);
    }
    common::drop_within(rt, Duration::from_secs(5), "after the waiters");
}

/// A runtime dropped while tasks await `ctrl_c` and fibers wait in `ctrl_c_blocking`:
/// the drop ends within its limit, the tasks and fibers are cancelled; a plain thread
/// waiting meanwhile is not disturbed and completes on the next SIGINT, and so does a
/// waiter of a new runtime.
#[test]
fn runtime_dropped_under_signal_waiters() {
    run_child("runtime_dropped_under_waiters", 20).assert_finished();
}

fn child_runtime_dropped_under_waiters() {
    install_handler();
    let rt1 = rt(2);
    let tasks: Vec<_> = (0..6).map(|_| spawn_ctrl_c(&rt1)).collect();
    for (_, p) in &tasks {
        wait_flag(p);
    }
    let (ran_tx, ran_rx) = mpsc::channel();
    let fibers: Vec<_> = (0..3)
        .map(|_| {
            let ran_tx = ran_tx.clone();
            fiber_on(&rt1, move || {
                ran_tx.send(()).unwrap();
                weft::signal::ctrl_c_blocking()
            })
        })
        .collect();
    for _ in 0..3 {
        ran_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    // A fiber in `ctrl_c_blocking` aborted: cancelled (unwound), not left waiting.
    let (ran_tx2, ran_rx2) = mpsc::channel();
    let aborted = fiber_on(&rt1, move || {
        ran_tx2.send(()).unwrap();
        weft::signal::ctrl_c_blocking()
    });
    ran_rx2.recv_timeout(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    aborted.abort();
    assert!(join_within(aborted, 5).unwrap_err().is_cancelled());
    let thread = std::thread::spawn(weft::signal::ctrl_c_blocking);
    std::thread::sleep(Duration::from_millis(20));
    common::drop_within(rt1, Duration::from_secs(5), "with signal waiters");
    for (h, _) in tasks {
        assert!(join_within(h, 5).unwrap_err().is_cancelled());
    }
    for h in fibers {
        match join_within(h, 5) {
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
            Ok(r) => panic!("a fiber's wait returned {r:?} without a signal"),
        }
    }
    assert!(
        !thread.is_finished(),
        "a plain thread's wait ended without a signal"
    );
    let rt2 = rt(1);
    let (h, p) = spawn_ctrl_c(&rt2);
    wait_flag(&p);
    raise_until("the thread and the new waiter", || {
        thread.is_finished() && h.is_finished()
    });
    thread_within(thread, 5).unwrap();
    join_within(h, 5).unwrap().unwrap();
}

/// A task blocked in `ctrl_c_blocking` (a worker helping meanwhile) when its runtime
/// is dropped. A socket wait there is ended by the shutdown (`shutdown_io`); this one
/// is not, and the drop waits for a SIGINT that may never come.
#[test]
fn runtime_drop_with_a_task_in_ctrl_c_blocking() {
    run_child("blocking_waiter_in_task_vs_drop", 20).assert_finished();
}

fn child_blocking_waiter_in_task_vs_drop() {
    install_handler();
    let rt = rt(2);
    let (tx, rx) = mpsc::channel();
    let h = rt.spawn(async move {
        tx.send(()).unwrap();
        weft::signal::ctrl_c_blocking()
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(rt);
        let _ = done_tx.send(());
    });
    let dropped = done_rx.recv_timeout(Duration::from_secs(3)).is_ok();
    if !dropped {
        // Let it go, so the child ends either way, then report.
        raise_until("the drop", || done_rx.try_recv().is_ok());
        panic!(
            "hang: the runtime's drop waited for a SIGINT (a task in ctrl_c_blocking \
             kept its worker); it returned only after one was raised"
        );
    }
    // The wait ended with the shutdown's error, and the task returned it.
    let out = join_within(h, 5).expect("the task ran to its end");
    let e = out.expect_err("no SIGINT was raised: the wait must end with an error");
    assert!(e.to_string().contains("shut down"), "{e}");
}

/// SIGINT raised every ~100 µs on whatever thread the kernel picks (workers in
/// `epoll_wait` or on their futex, fibers on their small stacks, plain threads blocked
/// in weft waits) while a 1 MiB echo runs between a fiber (blocking forms, with
/// timeouts) and a task (async forms), timers fire and plain threads join tasks: no
/// operation fails with `Interrupted` or otherwise, nothing is lost, and a waiter made
/// afterwards still completes.
#[test]
fn sigint_storm_does_not_disturb_io_timers_or_waits() {
    run_child("storm_vs_io", 30).assert_finished();
}

fn child_storm_vs_io() {
    install_handler();
    let rt = rt(2);
    let stop = Arc::new(AtomicBool::new(false));
    let raised = Arc::new(AtomicUsize::new(0));
    let storm = {
        let stop = stop.clone();
        let raised = raised.clone();
        std::thread::spawn(move || {
            for _ in 0..40_000 {
                if stop.load(SeqCst) {
                    break;
                }
                raise();
                raised.fetch_add(1, SeqCst);
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };
    let (a, b) = tcp_pair(&rt);
    const N: usize = 1 << 20;
    // The fiber echoes with the blocking forms (generous timeouts: a timeout is a
    // failure here).
    a.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    a.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let echo = fiber_on(&rt, move || {
        let mut a = a;
        let mut buf = vec![0u8; 4096];
        let mut total = 0;
        loop {
            let n = Read::read(&mut a, &mut buf).expect("fiber read");
            if n == 0 {
                break;
            }
            Write::write_all(&mut a, &buf[..n]).expect("fiber write");
            total += n;
        }
        total
    });
    let client = rt.spawn(async move {
        let (mut r, mut w) = b.into_split();
        let writer = weft::spawn(async move {
            let data = pattern(0, N);
            for c in data.chunks(3001) {
                w.write_all(c).await.expect("task write");
            }
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.expect("task read");
        writer.await.unwrap();
        got
    });
    let timers = rt.spawn(async {
        let mut n = 0;
        for _ in 0..200 {
            weft::time::sleep(Duration::from_millis(1)).await;
            n += 1;
        }
        n
    });
    // Plain threads: blocking joins of short tasks, and a blocking socket read with a
    // timeout that must elapse in full, not end early.
    let joins = {
        let h = rt.handle().clone();
        std::thread::spawn(move || {
            for i in 0..300u32 {
                assert_eq!(weft::wait(h.spawn(async move { i })).unwrap(), i);
            }
        })
    };
    let (quiet, _quiet_peer) = tcp_pair(&rt);
    let timed = std::thread::spawn(move || {
        quiet
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let t = Instant::now();
        let e = (&quiet).read(&mut [0u8; 8]).unwrap_err();
        (e.kind(), t.elapsed())
    });
    let got = join_within(client, 25).unwrap();
    assert!(got == pattern(0, N), "the echo came back intact");
    assert_eq!(join_within(echo, 5).unwrap(), N);
    assert_eq!(join_within(timers, 10).unwrap(), 200);
    thread_within(joins, 10);
    let (kind, took) = thread_within(timed, 10);
    assert_eq!(kind, io::ErrorKind::WouldBlock);
    assert!(
        took >= Duration::from_millis(295),
        "timed out early: {took:?}"
    );
    stop.store(true, SeqCst);
    thread_within(storm, 10);
    println!("CHILD raised={}", raised.load(SeqCst));
    let (h, p) = spawn_ctrl_c(&rt);
    wait_flag(&p);
    raise_until("the last waiter", || h.is_finished());
    join_within(h, 5).unwrap().unwrap();
}

/// Waiters made and dropped in a loop (timeouts of 0 to 2 ms round `ctrl_c`, in tasks
/// and on plain threads) while SIGINT keeps coming: no panic, no hang, and afterwards
/// one SIGINT still completes a set of new waiters.
#[test]
fn signal_waiters_churn_while_signals_arrive() {
    run_child("waiter_churn", 30).assert_finished();
}

fn child_waiter_churn() {
    install_handler();
    let rt = rt(2);
    let stop = Arc::new(AtomicBool::new(false));
    let storm = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                if stop.load(SeqCst) {
                    break;
                }
                raise();
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let completed = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8u64)
        .map(|i| {
            let completed = completed.clone();
            rt.spawn(async move {
                for k in 0..150u64 {
                    let d = Duration::from_micros((i * 131 + k * 37) % 2000);
                    if weft::time::timeout(d, weft::signal::ctrl_c()).await.is_ok() {
                        completed.fetch_add(1, SeqCst);
                    }
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..100 {
                    let mut f = pin!(weft::signal::ctrl_c());
                    let cx = &mut Context::from_waker(Waker::noop());
                    // A SIGINT published during the first poll completes it, and a
                    // completed future must not be polled again (CI, stop 44: "`async
                    // fn` resumed after completion", from this loop, not from weft).
                    if f.as_mut().poll(cx).is_pending() {
                        std::thread::sleep(Duration::from_micros(200));
                        let _ = f.as_mut().poll(cx);
                    }
                }
            })
        })
        .collect();
    for h in tasks {
        join_within(h, 25).unwrap();
    }
    for h in threads {
        thread_within(h, 10);
    }
    stop.store(true, SeqCst);
    thread_within(storm, 10);
    assert!(load_usize(&completed) > 0, "some waiter saw a signal");
    let waiters: Vec<_> = (0..8).map(|_| spawn_ctrl_c(&rt)).collect();
    for (_, p) in &waiters {
        wait_flag(p);
    }
    raise_until("the new waiters", || {
        waiters.iter().all(|(h, _)| h.is_finished())
    });
    for (h, _) in waiters {
        join_within(h, 5).unwrap().unwrap();
    }
}

fn load_usize(c: &AtomicUsize) -> usize {
    c.load(SeqCst)
}

// ---------------------------------------------------------------------------------
// 3. hyper: the Read adapter, the timer, the executor
// ---------------------------------------------------------------------------------

#[cfg(feature = "hyper")]
mod hyper_side {
    use super::*;
    use std::mem::MaybeUninit;

    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper::rt::{Executor, Read as HRead, ReadBuf, Sleep as HSleep, Timer};
    use weft::hyper::{WeftExecutor, WeftIo, WeftTimer};
    use weft::net::TcpListener;

    /// One `hyper::rt::Read::poll_read` of `io` into `rb`'s unfilled part.
    fn hpoll<T: AsyncRead + Unpin>(
        io: &mut WeftIo<T>,
        rb: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(io).poll_read(&mut cx, rb.unfilled())
    }

    /// The read adapter over every kind of answer a reader gives, into storage whose
    /// bytes are all 0xAA (hyper calls it uninitialized): after each poll the filled
    /// part is exactly the bytes reported so far (no zero, no 0xAA, no byte the reader
    /// wrote but did not report); a pending poll, an error and an end of stream add
    /// nothing; every buffer the reader is handed is initialized (all zero).
    #[test]
    fn hyper_read_adapter_never_exposes_more_than_reported() {
        watchdog(10, || {
            let mut storage = vec![MaybeUninit::new(0xAAu8); 100];
            let mut rb = ReadBuf::uninit(&mut storage);
            let mut io = WeftIo::new(Script::new([
                Step::Data(b"hello".to_vec()),
                Step::Pending,
                Step::Fail(io::ErrorKind::ConnectionReset),
                Step::Scribble { n: 3, fill: b'#' },
                Step::Scribble { n: 0, fill: b'@' },
                Step::Data(b" world".to_vec()),
            ]));
            let mut want = Vec::new();
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            want.extend_from_slice(b"hello");
            assert_eq!(rb.filled(), &want[..]);
            assert!(hpoll(&mut io, &mut rb).is_pending());
            assert_eq!(rb.filled(), &want[..]);
            match hpoll(&mut io, &mut rb) {
                Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
                other => panic!("{other:?}"),
            }
            assert_eq!(rb.filled(), &want[..]);
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            want.extend_from_slice(b"###");
            assert_eq!(rb.filled(), &want[..]);
            // A read of 0 (end of stream) adds nothing, whatever the reader scribbled.
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            assert_eq!(rb.filled(), &want[..]);
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            want.extend_from_slice(b" world");
            assert_eq!(rb.filled(), &want[..]);
            let seen = &io.inner().seen;
            assert!(seen.iter().all(|&(_, zeroed)| zeroed), "{seen:?}");
            // Each buffer was the unfilled part (at most), never past the storage.
            assert!(seen.iter().all(|&(len, _)| len <= 100));
        });
    }

    /// A reader that reports more than it was given: the adapter panics with its
    /// message (a broken reader), and the cursor is not advanced at all (hyper never
    /// sees bytes past the buffer, or any of this read).
    #[test]
    fn hyper_read_adapter_over_report_panics_without_advancing() {
        watchdog(10, || {
            let mut storage = vec![MaybeUninit::new(0xAAu8); 64];
            let mut rb = ReadBuf::uninit(&mut storage);
            let mut io = WeftIo::new(Script::new([
                Step::Data(b"ok".to_vec()),
                Step::OverReport { extra: 1 },
            ]));
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = hpoll(&mut io, &mut rb);
            }));
            let msg = common::panic_message(&*r.unwrap_err()).unwrap();
            assert!(msg.contains("more bytes than asked"), "{msg}");
            assert_eq!(rb.filled(), b"ok");
        });
    }

    /// A huge cursor (4 MiB): each read is asked for at most 64 KiB (the adaptive
    /// size, doubling from 1 KiB on full reads), and the bytes come through whole. A
    /// cursor smaller than the least read size (10 bytes) and an empty one are asked for
    /// exactly their room; reads that fill little bring the size back down.
    #[test]
    fn hyper_read_adapter_sizes_with_huge_tiny_and_empty_cursors() {
        watchdog(20, || {
            const N: usize = 4 << 20;
            let mut storage = vec![MaybeUninit::new(0xAAu8); N];
            let mut rb = ReadBuf::uninit(&mut storage);
            let mut io = WeftIo::new(Script::new([Step::Data(pattern(0, N))]));
            let mut polls = 0;
            while rb.filled().len() < N {
                assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
                polls += 1;
                assert!(polls < 1000);
            }
            assert!(rb.filled() == &pattern(0, N)[..]);
            let sizes: Vec<usize> = io.inner().seen.iter().map(|s| s.0).collect();
            assert_eq!(
                &sizes[..8],
                &[1024, 2048, 4096, 8192, 16384, 32768, 65536, 65536]
            );
            assert!(sizes.iter().all(|&s| s <= 65536));

            let mut small = vec![MaybeUninit::new(0xAAu8); 10];
            let mut rb = ReadBuf::uninit(&mut small);
            let mut io = WeftIo::new(Script::new([Step::Data(pattern(0, 30))]));
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            assert_eq!(rb.filled(), &pattern(0, 10)[..]);
            // Full now: the reader is handed an empty buffer, and nothing moves.
            assert!(matches!(hpoll(&mut io, &mut rb), Poll::Ready(Ok(()))));
            assert_eq!(rb.filled(), &pattern(0, 10)[..]);
            assert_eq!(io.inner().seen, [(10, true), (0, true)]);
        });
    }

    /// FNV-1a, to compare bodies without keeping two copies in messages.
    fn fnv(data: &[u8]) -> u64 {
        data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
    }

    /// A hyper server over `WeftIo` whose service answers with the length and hash of
    /// the request's body; returns the connection's task and a plain std client.
    fn hash_server(
        rt: &Runtime,
    ) -> (
        weft::JoinHandle<Result<(), hyper::Error>>,
        std::net::TcpStream,
    ) {
        let l = rt.block_on(async { TcpListener::bind(common::loopback()).await.unwrap() });
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let h = rt.spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let service = hyper::service::service_fn(
                |req: hyper::Request<hyper::body::Incoming>| async move {
                    let body = req.into_body().collect().await?.to_bytes();
                    let answer = format!("{} {:x}", body.len(), fnv(&body));
                    Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(answer))))
                },
            );
            hyper::server::conn::http1::Builder::new()
                .timer(WeftTimer::new())
                .serve_connection(WeftIo::new(s), service)
                .await
        });
        (h, c)
    }

    /// Reads one response with a `Content-Length` from `c`; returns its body.
    fn read_response(c: &mut std::net::TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_string();
                assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .expect("a content-length")
                    .trim()
                    .parse()
                    .unwrap();
                if got.len() >= end + 4 + len {
                    return String::from_utf8(got[end + 4..end + 4 + len].to_vec()).unwrap();
                }
            }
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "the server closed before the answer");
            got.extend_from_slice(&buf[..n]);
        }
    }

    /// Requests that come a byte at a time (the head) and in uneven pieces up to 64 KiB
    /// (a 700 KiB body), on one keep-alive connection: every body reaches the service
    /// whole (the adapter's read size moves up and down across them).
    #[test]
    fn hyper_server_over_short_and_long_reads() {
        watchdog(30, || {
            let rt = rt(2);
            let (h, mut c) = hash_server(&rt);
            for (round, len) in [(0usize, 10usize), (1, 700 << 10), (2, 1), (3, 100 << 10)] {
                let body = pattern(round * 7, len);
                let head =
                    format!("POST /{round} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n");
                for b in head.as_bytes() {
                    c.write_all(std::slice::from_ref(b)).unwrap();
                    if round == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                let mut at = 0;
                let mut k = 1usize;
                while at < len {
                    let n = (k * 7919 % 65_536 + 1).min(len - at);
                    c.write_all(&body[at..at + n]).unwrap();
                    at += n;
                    k += 1;
                }
                assert_eq!(read_response(&mut c), format!("{} {:x}", len, fnv(&body)));
            }
            drop(c);
            join_within(h, 10).unwrap().unwrap();
            // hyper's header-read timers (one per request head) are all off the wheel.
            common::wait_until("no hyper timer left", || rt.stats().timers_pending == 0);
        });
    }

    /// A hyper client over `WeftIo` reading a 2 MiB response that a plain thread writes
    /// head byte by byte and body in uneven pieces: the body arrives whole. Then a
    /// response cut mid-body (the server closes): the client gets an error, no panic,
    /// no hang.
    #[test]
    fn hyper_client_over_trickled_and_cut_responses() {
        watchdog(30, || {
            let rt = rt(2);
            const N: usize = 2 << 20;
            for cut in [false, true] {
                let l = std::net::TcpListener::bind(common::loopback()).unwrap();
                let addr = l.local_addr().unwrap();
                let server = std::thread::spawn(move || {
                    let (mut s, _) = l.accept().unwrap();
                    s.set_nodelay(true).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut req = Vec::new();
                    let mut b = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = s.read(&mut b).unwrap();
                        assert!(n > 0);
                        req.extend_from_slice(&b[..n]);
                    }
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {N}\r\n\r\n");
                    for b in head.as_bytes() {
                        s.write_all(std::slice::from_ref(b)).unwrap();
                    }
                    let body = pattern(3, N);
                    let stop = if cut { N / 3 } else { N };
                    let mut at = 0;
                    let mut k = 1usize;
                    while at < stop {
                        let n = (k * 104_729 % 100_000 + 1).min(stop - at);
                        if s.write_all(&body[at..at + n]).is_err() {
                            break;
                        }
                        at += n;
                        k += 1;
                    }
                });
                let r = rt.block_on(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    let (mut sender, conn) =
                        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(WeftIo::new(
                            stream,
                        ))
                        .await
                        .unwrap();
                    let conn = weft::spawn(conn);
                    let req = hyper::Request::get("/")
                        .header("host", "x")
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let res = sender.send_request(req).await.unwrap();
                    assert_eq!(res.status(), 200);
                    let body = res.into_body().collect().await.map(|b| b.to_bytes());
                    drop(sender);
                    let _ = conn.await;
                    body
                });
                thread_within(server, 10);
                match (cut, r) {
                    (false, Ok(body)) => assert!(body == pattern(3, N), "the body came whole"),
                    (true, Err(_)) => {}
                    (cut, r) => panic!("cut {cut}: {:?}", r.map(|b| b.len())),
                }
            }
        });
    }

    /// A hyper client request awaited with `weft::wait` on a plain thread, its
    /// connection driven by a task (spawned with `WeftExecutor`), against a server that
    /// never answers: the runtime is dropped meanwhile. The connection task is
    /// cancelled, and the waiting request ends with an error (no hang, no panic).
    /// The same with the request awaited in a fiber of a second runtime.
    #[test]
    fn hyper_client_waiting_when_the_runtime_is_dropped() {
        watchdog(30, || {
            for in_fiber in [false, true] {
                let rt = rt(2);
                let other = rt_named_other();
                let l = std::net::TcpListener::bind(common::loopback()).unwrap();
                let addr = l.local_addr().unwrap();
                let silent = std::thread::spawn(move || {
                    let (s, _) = l.accept().unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut b = [0u8; 1024];
                    // Read the request, answer nothing, hold the connection until the
                    // client's side goes.
                    while matches!((&s).read(&mut b), Ok(n) if n > 0) {}
                });
                let sender = rt.block_on(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
                        WeftIo::new(stream),
                    )
                    .await
                    .unwrap();
                    WeftExecutor::new().execute(async move {
                        let _ = conn.await;
                    });
                    sender
                });
                let (tx, rx) = mpsc::channel();
                let body = move || {
                    let mut sender = sender;
                    let req = hyper::Request::get("/")
                        .header("host", "x")
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let fut = sender.send_request(req);
                    tx.send(()).unwrap();
                    weft::wait(fut)
                        .map(|r| r.status().as_u16())
                        .map_err(|e| e.to_string())
                };
                let waiter: Box<dyn FnOnce() -> Result<u16, String> + Send> = if in_fiber {
                    let h = fiber_on(&other, body);
                    Box::new(move || join_within(h, 10).unwrap())
                } else {
                    let h = std::thread::spawn(body);
                    Box::new(move || thread_within(h, 10))
                };
                rx.recv_timeout(Duration::from_secs(5)).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                common::drop_within(rt, Duration::from_secs(5), "a hyper client waiting");
                let r = waiter();
                assert!(r.is_err(), "in_fiber {in_fiber}: {r:?}");
                thread_within(silent, 10);
                drop(other);
            }
        });
    }

    fn rt_named_other() -> Runtime {
        common::named_runtime("s33-other", 1)
    }

    /// Sleeps of `WeftTimer` made in a task (bound to its runtime) and then reset,
    /// awaited and dropped on plain threads: a reset moves the deadline, a sleep reset
    /// many times leaves one timer on the wheel, a drop anywhere takes it off.
    #[test]
    fn hyper_timer_sleeps_reset_and_dropped_on_plain_threads() {
        watchdog(20, || {
            let rt = rt(2);
            let timer = WeftTimer::new();
            let (mut a, b) = rt.block_on(async move {
                let mut a = timer.sleep(Duration::from_secs(60));
                let mut b = timer.sleep(Duration::from_secs(60));
                // Polled once each: filed on the wheel.
                let mut cx = Context::from_waker(Waker::noop());
                assert!(a.as_mut().poll(&mut cx).is_pending());
                assert!(b.as_mut().poll(&mut cx).is_pending());
                (a, b)
            });
            assert_eq!(rt.stats().timers_pending, 2);
            let dropper = std::thread::spawn(move || drop(b));
            thread_within(dropper, 5);
            assert_eq!(rt.stats().timers_pending, 1);
            let handle = rt.handle().clone();
            let waiter = std::thread::spawn(move || {
                // Many resets, earlier and later (each polled, so filed), then one 30 ms
                // away.
                let mut most = 0;
                for i in 0..500u64 {
                    let d = if i % 2 == 0 { 5 + i } else { 100_000 - i };
                    timer.reset(&mut a, Instant::now() + Duration::from_millis(d));
                    let mut cx = Context::from_waker(Waker::noop());
                    let _ = a.as_mut().poll(&mut cx);
                    most = most.max(handle.stats().timers_pending);
                }
                let t = Instant::now();
                timer.reset(&mut a, t + Duration::from_millis(30));
                weft::wait(a.as_mut());
                (t.elapsed(), most)
            });
            let (took, most) = thread_within(waiter, 10);
            assert!(took >= Duration::from_millis(30), "{took:?}");
            assert!(most <= 1, "resets piled up {most} timers on the wheel");
            common::wait_until("the wheel is empty", || rt.stats().timers_pending == 0);
        });
    }

    /// A sleep that is not weft's, reset through `WeftTimer`: replaced by one of weft's,
    /// which completes at the new deadline.
    #[test]
    fn hyper_timer_reset_of_a_foreign_sleep() {
        struct Never;
        impl Future for Never {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                Poll::Pending
            }
        }
        impl HSleep for Never {}
        watchdog(10, || {
            let rt = rt(1);
            rt.block_on(async {
                let timer = WeftTimer::new();
                let mut s: Pin<Box<dyn HSleep>> = Box::pin(Never);
                let t = Instant::now();
                timer.reset(&mut s, t + Duration::from_millis(10));
                s.as_mut().await;
                assert!(t.elapsed() >= Duration::from_millis(10));
            });
        });
    }

    /// Sleeps that outlive their runtime (hyper holding them in a connection state that
    /// a plain thread keeps): one filed on the wheel, one never polled, both reset and
    /// awaited on a plain thread after the runtime is gone, complete at their new
    /// deadlines (the alarm thread fires them); a long one is dropped without trouble.
    #[test]
    fn hyper_timer_sleeps_outlive_their_runtime() {
        watchdog(20, || {
            let rt = rt(2);
            let timer = WeftTimer::new();
            let (mut filed, mut fresh, long) = rt.block_on(async move {
                let mut filed = timer.sleep(Duration::from_secs(60));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(filed.as_mut().poll(&mut cx).is_pending());
                let fresh = timer.sleep(Duration::from_secs(60));
                let mut long = timer.sleep(Duration::from_secs(600));
                assert!(long.as_mut().poll(&mut cx).is_pending());
                (filed, fresh, long)
            });
            common::drop_within(rt, Duration::from_secs(5), "with hyper sleeps out");
            let h = std::thread::spawn(move || {
                let t = Instant::now();
                timer.reset(&mut filed, Instant::now() + Duration::from_millis(20));
                weft::wait(filed.as_mut());
                timer.reset(&mut fresh, Instant::now() + Duration::from_millis(20));
                weft::wait(fresh.as_mut());
                drop(long);
                t.elapsed()
            });
            let took = thread_within(h, 10);
            assert!(took >= Duration::from_millis(38), "{took:?}");
        });
    }

    /// A `WeftTimer` sleep made where no runtime is current binds to the runtime of the
    /// task that first polls it; polled first outside any runtime, it panics with weft's
    /// message (documented).
    #[test]
    fn hyper_timer_sleep_made_outside_a_runtime() {
        watchdog(10, || {
            let timer = WeftTimer::new();
            let made = Instant::now();
            let s = timer.sleep(Duration::from_millis(100));
            let rt = rt(1);
            let h = rt.spawn(async move {
                s.await;
                Instant::now()
            });
            let done = join_within(h, 5).unwrap();
            assert!(
                done - made >= Duration::from_millis(100),
                "{:?}",
                done - made
            );
            let mut s = timer.sleep(Duration::from_secs(10));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut cx = Context::from_waker(Waker::noop());
                let _ = s.as_mut().poll(&mut cx);
            }));
            let msg = common::panic_message(&*r.unwrap_err()).unwrap();
            assert!(msg.contains("no weft runtime"), "{msg}");
        });
    }

    /// `WeftExecutor::execute` from a task, a fiber and `block_on`: each future runs,
    /// and is dropped once done. From a task that runs while its runtime shuts down:
    /// the future is refused and dropped (not run, not leaked), and the drop ends.
    #[test]
    fn hyper_executor_in_every_context_and_at_shutdown() {
        watchdog(20, || {
            let rt = rt(2);
            let ran = common::counter();
            let dropped = common::counter();
            let fut = |ran: &Arc<AtomicUsize>, dropped: &Arc<AtomicUsize>| {
                let ran = ran.clone();
                let guard = common::DropCounter(dropped.clone());
                async move {
                    let _g = guard;
                    weft::task::yield_now().await;
                    ran.fetch_add(1, SeqCst);
                }
            };
            let (r1, d1) = (ran.clone(), dropped.clone());
            join_within(
                rt.spawn(async move { WeftExecutor::new().execute(fut(&r1, &d1)) }),
                5,
            )
            .unwrap();
            let (r2, d2) = (ran.clone(), dropped.clone());
            join_within(
                fiber_on(&rt, move || WeftExecutor::new().execute(fut(&r2, &d2))),
                5,
            )
            .unwrap();
            rt.block_on(async { WeftExecutor::new().execute(fut(&ran, &dropped)) });
            common::wait_until("three ran and were dropped", || {
                common::load(&ran) == 3 && common::load(&dropped) == 3
            });

            // At shutdown: a task blocks its worker until the shutdown has begun (a
            // pending task's cancellation says so), then executes.
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let (started_tx, started_rx) = mpsc::channel();
            let (r3, d3) = (ran.clone(), dropped.clone());
            rt.spawn(async move {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(Duration::from_secs(10));
                WeftExecutor::new().execute(fut(&r3, &d3));
            });
            started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let (begun_tx, begun_rx) = mpsc::channel();
            let _pending = common::pending_with_drop(&rt, move || {
                let _ = begun_tx.send(());
            });
            let dropper = std::thread::spawn(move || drop(rt));
            begun_rx.recv_timeout(Duration::from_secs(10)).unwrap();
            release_tx.send(()).unwrap();
            thread_within(dropper, 10);
            assert_eq!(common::load(&dropped), 4, "the refused future was dropped");
            assert_eq!(common::load(&ran), 3, "and never ran");
        });
    }
}

// ---------------------------------------------------------------------------------
// 4. Blocking socket forms: timeouts and contexts
// ---------------------------------------------------------------------------------

/// Where a blocking body runs.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Fiber,
    /// In a task: the blocking forms wait with `weft::wait` (the worker helps).
    Task,
    Thread,
}

const CTXS: [Ctx; 3] = [Ctx::Fiber, Ctx::Task, Ctx::Thread];

fn run_in<T: Send + 'static>(rt: &Runtime, ctx: Ctx, f: impl FnOnce() -> T + Send + 'static) -> T {
    match ctx {
        Ctx::Fiber => join_within(fiber_on(rt, f), 20).unwrap(),
        Ctx::Task => join_within(rt.spawn(async move { f() }), 20).unwrap(),
        Ctx::Thread => thread_within(std::thread::spawn(f), 20),
    }
}

/// A write timeout from a fiber, a task and a plain thread: writes into a peer that
/// does not read go on until the buffers fill, then one fails with `WouldBlock` after
/// about the timeout. Every byte a write reported as written reaches the peer, and no
/// other: the peer reads exactly the sum of the `Ok`s, in order.
#[test]
fn write_timeout_in_every_context_loses_and_invents_nothing() {
    watchdog(60, || {
        let rt = rt(2);
        for ctx in CTXS {
            let (w, mut peer) = weft_and_std(&rt);
            set_buf(w.as_raw_fd(), libc::SO_SNDBUF, 16 << 10);
            set_buf(peer.as_raw_fd(), libc::SO_RCVBUF, 16 << 10);
            w.set_write_timeout(Some(Duration::from_millis(80)))
                .unwrap();
            let (written, kind, took, w) = run_in(&rt, ctx, move || {
                let data = pattern(0, 64 << 20);
                let mut at = 0;
                loop {
                    let t = Instant::now();
                    match (&w).write(&data[at..at + 50_000]) {
                        Ok(n) => at += n,
                        Err(e) => return (at, e.kind(), t.elapsed(), w),
                    }
                    assert!(at < (60 << 20), "{ctx:?}: the buffers never filled");
                }
            });
            assert_eq!(kind, io::ErrorKind::WouldBlock, "{ctx:?}");
            assert!(
                took >= Duration::from_millis(75) && took < Duration::from_secs(5),
                "{ctx:?}: the write timed out after {took:?}"
            );
            w.shutdown(Shutdown::Write).unwrap();
            let mut got = Vec::new();
            peer.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            peer.read_to_end(&mut got).unwrap();
            assert_eq!(got.len(), written, "{ctx:?}: bytes reported vs received");
            assert!(got == pattern(0, written), "{ctx:?}: the stream is intact");
        }
    });
}

/// Turns on software transmit timestamps: every send then queues an entry on the
/// socket's error queue, which epoll reports as `EPOLLERR` (see `tests/review_net.rs`).
fn tx_timestamps(s: &impl std::os::fd::AsFd) {
    use nix::sys::socket::{setsockopt, sockopt, TimestampingFlag};
    let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY;
    setsockopt(s, sockopt::Timestamping, &flags).unwrap();
}

/// The timeout bounds the whole call, not each wait in it: a plain thread blocks
/// reading a stream with a 500 ms timeout while the same stream sends a byte every
/// 40 ms with transmit timestamps on, so every send is an `EPOLLERR` event that wakes
/// the reader, which then finds nothing to read (`WouldBlock`, cleared, wait again).
/// The read still times out about 500 ms after the call, not after the last wake.
#[test]
fn read_timeout_is_not_extended_by_wakes_that_bring_nothing() {
    watchdog(30, || {
        let rt = rt(2);
        for ctx in CTXS {
            let (s, mut peer) = weft_and_std(&rt);
            tx_timestamps(&s);
            let s = Arc::new(s);
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let events_before = rt.stats().io_events;
            let (tx, rx) = mpsc::channel();
            let sender = {
                let s = s.clone();
                std::thread::spawn(move || {
                    rx.recv_timeout(Duration::from_secs(5)).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    let mut sent = 0;
                    for _ in 0..15 {
                        if s.try_write(b"x").is_ok() {
                            sent += 1;
                        }
                        std::thread::sleep(Duration::from_millis(40));
                    }
                    sent
                })
            };
            let s1 = s.clone();
            let (r, took) = run_in(&rt, ctx, move || {
                tx.send(()).unwrap();
                let t = Instant::now();
                let r = (&*s1).read(&mut [0u8; 1]);
                (r.map_err(|e| e.kind()), t.elapsed())
            });
            let sent = thread_within(sender, 10);
            let events = rt.stats().io_events - events_before;
            let mut got = vec![0u8; sent];
            peer.read_exact(&mut got).unwrap();
            assert!(events >= 5, "{ctx:?}: the sends made {events} events");
            assert_eq!(r, Err(io::ErrorKind::WouldBlock), "{ctx:?}");
            assert!(took >= Duration::from_millis(495), "{ctx:?}: {took:?}");
            assert!(
                took < Duration::from_millis(800),
                "{ctx:?}: the timeout ran from a later wake, not the call: {took:?}"
            );
        }
    });
}

/// One stream through every context: made in a fiber with `connect_blocking`, written
/// and read by a task on (likely) the other worker with the async forms, read by a plain
/// thread with the blocking form and a timeout, then dropped on another plain thread.
/// Data goes through intact both ways; the peer sees the end of stream after the drop;
/// the runtime's registered sources come back to where they were.
#[test]
fn stream_moved_between_fiber_task_and_threads() {
    watchdog(30, || {
        let rt = rt(2);
        let l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let addr = l.local_addr().unwrap();
        let base = rt.stats().io_sources;
        let made = fiber_on(&rt, move || TcpStream::connect_blocking(addr).unwrap());
        let (mut peer, _) = l.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let s = join_within(made, 10).unwrap();
        assert_eq!(rt.stats().io_sources, base + 1);
        // A task: async forms.
        let t = rt.spawn(async move {
            let mut s = s;
            AsyncWriteExt::write_all(&mut s, &pattern(0, 300_000))
                .await
                .unwrap();
            let mut b = vec![0u8; 200_000];
            AsyncReadExt::read_exact(&mut s, &mut b).await.unwrap();
            (s, b)
        });
        let mut got = vec![0u8; 300_000];
        peer.read_exact(&mut got).unwrap();
        assert!(got == pattern(0, 300_000));
        peer.write_all(&pattern(7, 200_000)).unwrap();
        let (s, b) = join_within(t, 10).unwrap();
        assert!(b == pattern(7, 200_000));
        // A plain thread: blocking read with a timeout, first timing out, then data.
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let (timed_out_tx, timed_out_rx) = mpsc::channel();
        let th = std::thread::spawn(move || {
            let e = (&s).read(&mut [0u8; 4]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            timed_out_tx.send(()).unwrap();
            let mut b = [0u8; 5];
            (&s).read_exact(&mut b).unwrap();
            (s, b)
        });
        timed_out_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        peer.write_all(b"hello").unwrap();
        let (s, b) = thread_within(th, 10);
        assert_eq!(&b, b"hello");
        thread_within(std::thread::spawn(move || drop(s)), 5);
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        assert_eq!(rt.stats().io_sources, base);
    });
}

/// A fiber blocked in a socket read with a long timeout (30 s) when its runtime is
/// dropped: the drop ends within its limit, and the fiber does not sit out its timeout
/// (it is cancelled, or its read fails with the shutdown error, not `WouldBlock`). The
/// same for a fiber of runtime B blocked on a socket of runtime A when A is dropped:
/// its read fails at once, B lives on, and the socket's later waits fail at once too.
#[test]
fn runtime_dropped_under_a_fiber_in_a_timed_read() {
    watchdog(30, || {
        let a = rt(2);
        let (s, _peer) = weft_and_std(&a);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (tx, rx) = mpsc::channel();
        let f = fiber_on(&a, move || {
            tx.send(()).unwrap();
            (&s).read(&mut [0u8; 8]).map_err(|e| e.kind())
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        common::drop_within(a, Duration::from_secs(5), "a fiber in a timed read");
        match join_within(f, 5) {
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
            Ok(r) => assert!(
                matches!(r, Err(k) if k != io::ErrorKind::WouldBlock),
                "the read returned {r:?}"
            ),
        }
        assert!(t.elapsed() < Duration::from_secs(5));

        // Across runtimes.
        let a = rt(1);
        let b = rt(2);
        let (s, _peer) = weft_and_std(&a);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let s = Arc::new(s);
        let (tx, rx) = mpsc::channel();
        let s1 = s.clone();
        let f = fiber_on(&b, move || {
            tx.send(()).unwrap();
            let t = Instant::now();
            let r = (&*s1).read(&mut [0u8; 8]).map_err(|e| e.to_string());
            (r, t.elapsed())
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        common::drop_within(a, Duration::from_secs(5), "runtime A");
        let (r, took) = join_within(f, 10).unwrap();
        let e = r.unwrap_err();
        assert!(e.contains("shut down"), "{e}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let t = Instant::now();
        let s2 = s.clone();
        let again = fiber_on(&b, move || (&*s2).read(&mut [0u8; 8]).is_err());
        assert!(join_within(again, 5).unwrap());
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(join_within(b.spawn(async { 5 }), 5).unwrap(), 5);

        // The other way round: B's fiber waits (with a timeout) on A's socket, and B is
        // dropped. The fiber is cancelled; its wait leaves nothing on A (no listed
        // waiter, no timer on A's wheel), and A's socket reads normally afterwards.
        let a = rt(1);
        let b = rt(1);
        let (s, mut peer) = weft_and_std(&a);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let s = Arc::new(s);
        let (tx, rx) = mpsc::channel();
        let s1 = s.clone();
        let f = fiber_on(&b, move || {
            tx.send(()).unwrap();
            (&*s1).read(&mut [0u8; 8]).map_err(|e| e.kind())
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        common::wait_until("A's wheel holds the fiber's timeout", || {
            a.stats().timers_pending == 1
        });
        common::drop_within(b, Duration::from_secs(5), "runtime B");
        match join_within(f, 5) {
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
            Ok(r) => panic!("B's fiber read returned {r:?}"),
        }
        common::wait_until("A's wheel is empty", || a.stats().timers_pending == 0);
        peer.write_all(b"after").unwrap();
        let mut got = [0u8; 5];
        let s2 = s.clone();
        let got = thread_within(
            std::thread::spawn(move || {
                (&*s2).read_exact(&mut got).unwrap();
                got
            }),
            10,
        );
        assert_eq!(&got, b"after");
    });
}

/// Blocking reads with a timeout that get their data in time, 150 of them from each
/// of a fiber, a task and a plain thread: each leaves no timer behind on the wheel.
#[test]
fn timed_reads_that_succeed_leave_no_timer() {
    watchdog(30, || {
        let rt = rt(2);
        for ctx in CTXS {
            let (s, mut peer) = weft_and_std(&rt);
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let writer = std::thread::spawn(move || {
                for i in 0..150u8 {
                    go_rx.recv_timeout(Duration::from_secs(10)).unwrap();
                    // Give the reader time to block first, now and then.
                    if i % 10 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    peer.write_all(&[i]).unwrap();
                }
                peer
            });
            let got = run_in(&rt, ctx, move || {
                let mut got = Vec::new();
                for _ in 0..150 {
                    go_tx.send(()).unwrap();
                    let mut b = [0u8; 1];
                    (&s).read_exact(&mut b).unwrap();
                    got.push(b[0]);
                }
                got
            });
            let _peer = thread_within(writer, 10);
            assert_eq!(got, (0..150u8).collect::<Vec<_>>(), "{ctx:?}");
            common::wait_until("no timer left", || rt.stats().timers_pending == 0);
        }
    });
}

/// A UDP `recv_blocking` with a read timeout from a task (the worker helps), and a Unix
/// stream's write timeout from a fiber: both end with `WouldBlock` after about the
/// timeout; the UDP socket then receives a datagram normally.
#[test]
fn udp_and_unix_timeouts_in_task_and_fiber() {
    watchdog(30, || {
        let rt = rt(2);
        let u = rt.block_on(async { UdpSocket::bind(common::loopback()).await.unwrap() });
        let to = u.local_addr().unwrap();
        u.set_read_timeout(Some(Duration::from_millis(60))).unwrap();
        let (kind, took, u) = join_within(
            rt.spawn(async move {
                let t = Instant::now();
                let e = u.recv_blocking(&mut [0u8; 16]).unwrap_err();
                (e.kind(), t.elapsed(), u)
            }),
            10,
        )
        .unwrap();
        assert_eq!(kind, io::ErrorKind::WouldBlock);
        assert!(
            took >= Duration::from_millis(55) && took < Duration::from_secs(5),
            "{took:?}"
        );
        let sender = std::net::UdpSocket::bind(common::loopback()).unwrap();
        sender.send_to(b"dgram", to).unwrap();
        let mut b = [0u8; 16];
        let n = run_in(&rt, Ctx::Fiber, move || {
            u.recv_blocking(&mut b).map(|n| b[..n].to_vec())
        })
        .unwrap();
        assert_eq!(n, b"dgram");

        let (a, _b) = rt.block_on(async { UnixStream::pair().unwrap() });
        set_buf(a.as_raw_fd(), libc::SO_SNDBUF, 8 << 10);
        a.set_write_timeout(Some(Duration::from_millis(60)))
            .unwrap();
        let (kind, took) = run_in(&rt, Ctx::Fiber, move || {
            let big = vec![0u8; 1 << 16];
            for _ in 0..100_000 {
                let t = Instant::now();
                if let Err(e) = (&a).write(&big) {
                    return (e.kind(), t.elapsed());
                }
            }
            panic!("the buffer never filled");
        });
        assert_eq!(kind, io::ErrorKind::WouldBlock);
        assert!(
            took >= Duration::from_millis(55) && took < Duration::from_secs(5),
            "{took:?}"
        );
    });
}

/// A plain thread's blocking read on a socket of a runtime whose every worker is in a
/// long poll (two tasks computing for 1.2 s on a two-worker runtime without an
/// interactive pool, temporary workers on by default): its 100 ms read timeout, and
/// data that comes after 50 ms, both wait for the computations to end. Nothing fires
/// the socket's timer or reads its event: sysmon hands the drivers only to a *parked*
/// worker (`nudge_for_the_drivers`) and starts a temporary worker only for *queued
/// tasks* (`consider_start`), and a due timer or a pending socket event is neither.
/// A task's own `sleep` waits the same way. With a parked worker anywhere (a default
/// runtime's interactive pool) the same reads end on time.
#[test]
fn plain_thread_socket_timeout_while_every_worker_is_busy() {
    watchdog(30, || {
        let rt = rt(2);
        let (quiet, _quiet_peer) = weft_and_std(&rt);
        let (fed, mut fed_peer) = weft_and_std(&rt);
        quiet
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let tx = tx.clone();
                rt.spawn(async move {
                    tx.send(()).unwrap();
                    common::spin_for(Duration::from_millis(1200));
                })
            })
            .collect();
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        let timed = std::thread::spawn(move || {
            let t = Instant::now();
            let r = (&quiet).read(&mut [0u8; 4]).map_err(|e| e.kind());
            (r, t.elapsed())
        });
        let reader = std::thread::spawn(move || {
            let mut b = [0u8; 4];
            let r = (&fed).read(&mut b).map_err(|e| e.kind());
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(50));
        let sent = Instant::now();
        fed_peer.write_all(b"data").unwrap();
        let (r1, took1) = thread_within(timed, 10);
        let (r2, got_at) = thread_within(reader, 10);
        for b in busy {
            join_within(b, 10).unwrap();
        }
        assert_eq!(r1, Err(io::ErrorKind::WouldBlock));
        assert_eq!(r2, Ok(4));
        let late = got_at.saturating_duration_since(sent);
        assert!(
            took1 < Duration::from_millis(800) && late < Duration::from_millis(700),
            "a 100 ms read timeout took {took1:?}, and data sent was read {late:?} later: \
             both waited for the workers' long polls"
        );
    });
}
