//! Review session 40: `weft::io`'s extension futures, the hyper glue (`WeftIo`,
//! `WeftExecutor`, `WeftTimer`) and `weft::signal::ctrl_c`, attacked from safe code only.
//!
//! The extension futures are cancelled at each pending point and fed readers and
//! writers that lie about sizes, return `Interrupted`, zero-length buffers and invalid
//! UTF-8 split across reads. `WeftIo` carries hyper's client and server over TCP and
//! Unix streams, with resets mid-request, half-closes, connection futures dropped on
//! other threads and runtimes dropped while hyper waits. `WeftTimer`'s sleeps are reset
//! and dropped on other threads and must leave `Stats::timers_pending` at zero.
//! `ctrl_c` runs in a child process only (an uninstalled `SIGINT` ends the process).
//!
//! A test that found a bug says so above it, and asserts the corrected behaviour.

// Fibers and sleeps are made inside `block_on` (bound to that runtime) and used
// elsewhere: the future returning a future is the point.
#![allow(clippy::async_yields_async)]

mod common;

use common::placement::ms;

use std::future::Future;
use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{poll_once, watchdog, workers};
use weft::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

// ---------------------------------------------------------------------------------
// Scripted readers and writers.
// ---------------------------------------------------------------------------------

/// One step of a scripted reader.
#[derive(Clone)]
enum Step {
    Data(Vec<u8>),
    Pending,
    Interrupted,
    Fail,
    /// Fills the whole buffer with `fill` but claims `claim` bytes.
    Lie {
        fill: u8,
        claim: usize,
    },
}

/// A reader that follows its script, then reports end of stream.
struct Script {
    steps: std::collections::VecDeque<Step>,
    /// A part of `Data` that did not fit.
    rest: Vec<u8>,
    polls: usize,
}

impl Script {
    fn new(steps: impl IntoIterator<Item = Step>) -> Script {
        Script {
            steps: steps.into_iter().collect(),
            rest: Vec::new(),
            polls: 0,
        }
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.polls += 1;
        if !self.rest.is_empty() {
            let n = buf.len().min(self.rest.len());
            buf[..n].copy_from_slice(&self.rest[..n]);
            self.rest.drain(..n);
            return Poll::Ready(Ok(n));
        }
        match self.steps.pop_front() {
            None => Poll::Ready(Ok(0)),
            Some(Step::Data(d)) => {
                let n = buf.len().min(d.len());
                buf[..n].copy_from_slice(&d[..n]);
                self.rest = d[n..].to_vec();
                Poll::Ready(Ok(n))
            }
            Some(Step::Pending) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(Step::Interrupted) => Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Some(Step::Fail) => Poll::Ready(Err(io::Error::other("scripted failure"))),
            Some(Step::Lie { fill, claim }) => {
                buf.fill(fill);
                Poll::Ready(Ok(claim))
            }
        }
    }
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// Polls `f` until ready on this thread (the scripted readers wake themselves), at
/// most 10,000 polls.
fn drive<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    for _ in 0..10_000 {
        if let Poll::Ready(v) = poll_once(f.as_mut(), Waker::noop()) {
            return v;
        }
    }
    panic!("hang: the future never completed");
}

// ---------------------------------------------------------------------------------
// AsyncReadExt
// ---------------------------------------------------------------------------------

#[test]
fn read_exact_with_a_lying_reader_clamps_and_stays_in_bounds() {
    let mut r = Script::new([
        Step::Data(b"ab".to_vec()),
        Step::Lie {
            fill: b'z',
            claim: usize::MAX,
        },
    ]);
    let mut buf = [0u8; 8];
    let n = drive(r.read_exact(&mut buf)).unwrap();
    assert_eq!(n, 8);
    assert_eq!(&buf, b"abzzzzzz");
}

#[test]
fn read_to_end_with_a_lying_reader_counts_only_what_fit() {
    let mut r = Script::new([
        Step::Data(b"head".to_vec()),
        Step::Lie {
            fill: b'q',
            claim: usize::MAX / 2,
        },
        Step::Data(b"tail".to_vec()),
    ]);
    let mut v = b"pre".to_vec();
    let n = drive(r.read_to_end(&mut v)).unwrap();
    assert_eq!(n, v.len() - 3);
    assert!(v.starts_with(b"prehead"));
    assert!(v.ends_with(b"tail"));
    assert!(v[7..v.len() - 4].iter().all(|&b| b == b'q'));
}

#[test]
fn read_to_string_with_a_lying_reader_is_an_error_or_utf8() {
    // The lie claims bytes that were never written by it (they are the zeroes the
    // buffer held): valid UTF-8 (NULs) or an error, never UB.
    let mut r = Script::new([Step::Lie {
        fill: b'a',
        claim: 1 << 40,
    }]);
    let mut s = String::from("x");
    let n = drive(r.read_to_string(&mut s)).unwrap();
    assert_eq!(s.len(), 1 + n);
    assert!(s[1..].bytes().all(|b| b == b'a'));
}

#[test]
fn zero_length_buffers() {
    let mut r = Script::new([Step::Data(b"data".to_vec())]);
    // read_exact of nothing: done, no poll of the reader.
    assert_eq!(drive(r.read_exact(&mut [])).unwrap(), 0);
    assert_eq!(r.polls, 0);
    // read of nothing: whatever the reader says (0 here), and no data lost.
    assert_eq!(drive(r.read(&mut [])).unwrap(), 0);
    let mut v = Vec::new();
    drive(r.read_to_end(&mut v)).unwrap();
    assert_eq!(v, b"data");
    // Writes of nothing.
    let mut out = Vec::new();
    drive(AsyncWriteExt::write_all(&mut out, &[])).unwrap();
    assert_eq!(drive(AsyncWriteExt::write(&mut out, &[])).unwrap(), 0);
    assert!(out.is_empty());
}

#[test]
fn read_to_end_cancelled_at_each_pending_point_keeps_every_byte() {
    // Cancel at the k-th pending point for each k; what is left in the vector plus
    // what a fresh read_to_end reads afterwards must be the whole stream.
    let script = || {
        let mut steps = Vec::new();
        for i in 0..12u8 {
            steps.push(Step::Data(vec![i; 30 + i as usize * 17]));
            steps.push(Step::Pending);
            if i % 3 == 0 {
                steps.push(Step::Interrupted);
            }
        }
        steps
    };
    let whole: Vec<u8> = script()
        .into_iter()
        .flat_map(|s| match s {
            Step::Data(d) => d,
            _ => Vec::new(),
        })
        .collect();
    for cancel_at in 1..=12 {
        for cap in [0usize, 5, 64, 4096] {
            let mut r = Script::new(script());
            let mut v = Vec::with_capacity(cap);
            v.extend_from_slice(b"old");
            {
                let mut f = pin!(r.read_to_end(&mut v));
                let mut pendings = 0;
                while pendings < cancel_at {
                    match f.as_mut().poll(&mut noop_cx()) {
                        Poll::Pending => pendings += 1,
                        Poll::Ready(r) => panic!("ended early: {r:?}"),
                    }
                }
            }
            assert!(v.starts_with(b"old"));
            // No zeroes past the data.
            let kept = v.len() - 3;
            assert_eq!(&v[3..], &whole[..kept], "cancel_at {cancel_at} cap {cap}");
            drive(r.read_to_end(&mut v)).unwrap();
            assert_eq!(&v[3..], &whole[..], "cancel_at {cancel_at} cap {cap}");
        }
    }
}

#[test]
fn read_to_end_forgotten_leaves_documented_zeroes_only() {
    let mut r = Script::new([Step::Data(b"abc".to_vec()), Step::Pending]);
    let mut v = Vec::with_capacity(100);
    {
        let mut f = Box::pin(r.read_to_end(&mut v));
        assert!(f.as_mut().poll(&mut noop_cx()).is_pending());
        std::mem::forget(f);
    }
    assert!(v.starts_with(b"abc"));
    assert!(v[3..].iter().all(|&b| b == 0));
    assert_eq!(v.len(), v.capacity());
}

#[test]
fn read_to_end_error_keeps_bytes_and_a_reader_panic_truncates() {
    let mut r = Script::new([Step::Data(b"abc".to_vec()), Step::Fail]);
    let mut v = Vec::new();
    assert!(drive(r.read_to_end(&mut v)).is_err());
    assert_eq!(v, b"abc");

    struct Boom(bool);
    impl AsyncRead for Boom {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            if self.0 {
                panic!("reader panics");
            }
            self.0 = true;
            buf[..2].copy_from_slice(b"xy");
            Poll::Ready(Ok(2))
        }
    }
    let mut v = b"1".to_vec();
    let mut b = Boom(false);
    let r = catch_unwind(AssertUnwindSafe(|| drive(b.read_to_end(&mut v))));
    assert!(r.is_err());
    assert_eq!(v, b"1xy");
}

#[test]
fn read_to_string_utf8_split_across_reads() {
    // "é" (C3 A9) and "😀" (F0 9F 98 80) split over reads: valid.
    let mut r = Script::new([
        Step::Data(vec![b'a', 0xC3]),
        Step::Pending,
        Step::Data(vec![0xA9, 0xF0]),
        Step::Interrupted,
        Step::Data(vec![0x9F]),
        Step::Data(vec![0x98, 0x80, b'z']),
    ]);
    let mut s = String::from("<");
    assert_eq!(drive(r.read_to_string(&mut s)).unwrap(), 8);
    assert_eq!(s, "<aé😀z");

    // A truncated sequence at the end of the stream: InvalidData, buf untouched.
    let mut r = Script::new([Step::Data(vec![b'a', 0xF0, 0x9F]), Step::Pending]);
    let mut s = String::from("keep");
    let e = drive(r.read_to_string(&mut s)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert_eq!(s, "keep");

    // Invalid byte in the middle.
    let mut r = Script::new([Step::Data(vec![b'a', 0xC3]), Step::Data(vec![b'b'])]);
    let mut s = String::new();
    assert_eq!(
        drive(r.read_to_string(&mut s)).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    assert!(s.is_empty());

    // An I/O error midway: buf untouched (documented: the bytes are lost).
    let mut r = Script::new([Step::Data(b"abc".to_vec()), Step::Fail]);
    let mut s = String::from("k");
    assert!(drive(r.read_to_string(&mut s)).is_err());
    assert_eq!(s, "k");
}

#[test]
fn read_to_end_in_tiny_pieces_is_linear() {
    // 1-byte reads of 2 MiB: linear, bounded.
    struct Drip(usize);
    impl AsyncRead for Drip {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            if self.0 == 0 || buf.is_empty() {
                return Poll::Ready(Ok(0));
            }
            self.0 -= 1;
            buf[0] = (self.0 % 251) as u8;
            Poll::Ready(Ok(1))
        }
    }
    watchdog(20, || {
        let start = Instant::now();
        let mut v = Vec::new();
        let n = drive(Drip(2 << 20).read_to_end(&mut v)).unwrap();
        assert_eq!(n, 2 << 20);
        assert_eq!(v.len(), 2 << 20);
        assert!(v.capacity() <= 8 << 20, "capacity {}", v.capacity());
        assert!(start.elapsed() < Duration::from_secs(10));
    });
}

/// A writer taking at most `chunk` bytes a call, pending every other call.
struct Slow {
    out: Vec<u8>,
    chunk: usize,
    flip: bool,
    claim_extra: usize,
}

impl AsyncWrite for Slow {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.flip = !self.flip;
        if self.flip {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = buf.len().min(self.chunk);
        self.out.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n + self.claim_extra))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[test]
fn write_all_cancelled_writes_a_prefix() {
    let data: Vec<u8> = (0..200u8).collect();
    for cancel_at in 1..20 {
        let mut w = Slow {
            out: Vec::new(),
            chunk: 7,
            flip: false,
            claim_extra: 0,
        };
        {
            let mut f = pin!(w.write_all(&data));
            for _ in 0..cancel_at {
                if f.as_mut().poll(&mut noop_cx()).is_ready() {
                    break;
                }
            }
        }
        assert_eq!(&w.out[..], &data[..w.out.len()]);
        drive(w.write_all(&data[w.out.len()..])).unwrap();
        assert_eq!(w.out, data);
    }
}

/// Found in review: `write_all` panicked (slice index out of range) when a writer
/// claimed more than it was given; it now fails with `InvalidData`.
#[test]
fn write_all_with_a_lying_writer_does_not_panic() {
    let mut w = Slow {
        out: Vec::new(),
        chunk: 3,
        flip: true,
        claim_extra: 10,
    };
    let r = catch_unwind(AssertUnwindSafe(|| drive(w.write_all(b"hello"))));
    let r = r.expect("write_all panicked on a writer claiming too much");
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidData);
}

#[test]
fn write_all_with_a_lying_writer_never_goes_out_of_bounds() {
    // Whatever the outcome, no byte past `buf` is read.
    let mut w = Slow {
        out: Vec::new(),
        chunk: 3,
        flip: true,
        claim_extra: 10,
    };
    let data = b"hello";
    let _ = catch_unwind(AssertUnwindSafe(|| drive(w.write_all(data))));
    assert_eq!(&w.out[..], &data[..w.out.len()]);
}

#[test]
fn tcp_read_to_end_and_string_lose_no_bytes() {
    let rt = workers(2);
    watchdog(20, move || {
        let (mut w, mut peer) = common::net::weft_and_std(&rt);
        let data: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 253) as u8).collect();
        let d2 = data.clone();
        let t = std::thread::spawn(move || {
            for c in d2.chunks(7777) {
                peer.write_all(c).unwrap();
            }
            peer.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            peer.read_to_end(&mut back).unwrap();
            back
        });
        let got = rt.block_on(async {
            let mut v = Vec::new();
            let n = AsyncReadExt::read_to_end(&mut w, &mut v).await.unwrap();
            assert_eq!(n, v.len());
            // Further reads after end of stream: 0, at once.
            assert_eq!(AsyncReadExt::read(&mut w, &mut [0; 4]).await.unwrap(), 0);
            AsyncWriteExt::write_all(&mut w, b"echo").await.unwrap();
            AsyncWriteExt::flush(&mut w).await.unwrap();
            // (`w.shutdown()` names the inherent `TcpStream::shutdown(how)`.)
            AsyncWriteExt::shutdown(&mut w).await.unwrap();
            // A write after shutdown is an error, not a signal or a panic.
            assert!(AsyncWriteExt::write_all(&mut w, b"late").await.is_err());
            v
        });
        assert!(got == data, "bytes lost or reordered");
        assert_eq!(common::thread_within(t, 10), b"echo");
    });
}

#[test]
fn tcp_read_to_end_cancelled_by_timeout_then_resumed() {
    // read_exact is not cancel safe (documented); read_to_end is: after a timeout on a
    // read_to_end the bytes already read are in the vector and the rest follows.
    let rt = workers(2);
    watchdog(20, move || {
        let (mut w, mut peer) = common::net::weft_and_std(&rt);
        peer.write_all(b"first").unwrap();
        let v = rt.block_on(async {
            let mut v = Vec::new();
            let r = weft::time::timeout(ms(50), AsyncReadExt::read_to_end(&mut w, &mut v)).await;
            assert!(r.is_err());
            assert_eq!(v, b"first");
            v
        });
        peer.write_all(b"second").unwrap();
        drop(peer);
        rt.block_on(async move {
            let mut v = v;
            AsyncReadExt::read_to_end(&mut w, &mut v).await.unwrap();
            assert_eq!(v, b"firstsecond");
        });
    });
}

#[test]
fn tcp_read_to_string_split_utf8_over_segments() {
    let rt = workers(2);
    watchdog(20, move || {
        let (mut w, mut peer) = common::net::weft_and_std(&rt);
        let t = std::thread::spawn(move || {
            let text = "añ😀b".repeat(1000);
            let bytes = text.as_bytes();
            // Split inside code points, with pauses so reads see the pieces.
            for (i, c) in bytes.chunks(3).enumerate() {
                peer.write_all(c).unwrap();
                if i % 200 == 0 {
                    std::thread::sleep(ms(1));
                }
            }
            drop(peer);
            text
        });
        let s = rt.block_on(async move {
            let mut s = String::new();
            AsyncReadExt::read_to_string(&mut w, &mut s).await.unwrap();
            s
        });
        assert_eq!(s, common::thread_within(t, 10));
    });
}

// ---------------------------------------------------------------------------------
// ctrl_c, in child processes.
// ---------------------------------------------------------------------------------

const CASE_VAR: &str = "WEFT_REVIEW_S40_IO_CASE";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    match case.as_str() {
        "dropped_then_many" => signal_dropped_then_many(),
        "before_poll_not_counted" => signal_before_poll_not_counted(),
        "runtime_dropped" => signal_runtime_dropped(),
        "churn" => signal_churn(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) {
    let out = common::child::run_case(CASE_VAR, case, common::child::LIMIT);
    out.assert_finished();
}

/// Polled-then-dropped waits before any signal; then many waiters of every kind, all
/// completed by SIGINTs.
fn signal_dropped_then_many() {
    use common::signal::{install_handler, raise_until};
    install_handler();
    let rt = weft::Builder::new().worker_threads(3).build().unwrap();
    // Polled then dropped: in block_on (timeout), in tasks (abort) and by hand.
    rt.block_on(async {
        for _ in 0..50 {
            assert!(weft::time::timeout(Duration::ZERO, weft::signal::ctrl_c())
                .await
                .is_err());
        }
    });
    let mut aborted = Vec::new();
    for _ in 0..50 {
        aborted.push(rt.spawn(weft::signal::ctrl_c()));
    }
    std::thread::sleep(ms(20));
    for h in &aborted {
        h.abort();
    }
    for _ in 0..50 {
        let mut f = Box::pin(weft::signal::ctrl_c());
        assert!(f.as_mut().poll(&mut noop_cx()).is_pending());
        // Dropped on another thread.
        std::thread::spawn(move || drop(f)).join().unwrap();
    }
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let d = done.clone();
        tasks.push(rt.spawn(async move {
            weft::signal::ctrl_c().await.unwrap();
            d.fetch_add(1, SeqCst);
        }));
    }
    let mut fibers = Vec::new();
    for _ in 0..4 {
        let d = done.clone();
        fibers.push(rt.block_on(async {
            weft::fiber::spawn(move || {
                weft::signal::ctrl_c_blocking().unwrap();
                d.fetch_add(1, SeqCst);
            })
        }));
    }
    let mut threads = Vec::new();
    for _ in 0..3 {
        let d = done.clone();
        threads.push(std::thread::spawn(move || {
            weft::signal::ctrl_c_blocking().unwrap();
            d.fetch_add(1, SeqCst);
        }));
    }
    // Inside a blocking closure on a worker (weft::wait in a task).
    let d = done.clone();
    let nested = rt.spawn(async move {
        weft::signal::ctrl_c_blocking().unwrap();
        d.fetch_add(1, SeqCst);
    });
    raise_until("every waiter", || done.load(SeqCst) == 28);
    for h in aborted {
        let _ = rt.block_on(h);
    }
    for h in tasks {
        rt.block_on(h).unwrap();
    }
    rt.block_on(nested).unwrap();
    for f in fibers {
        f.join().unwrap();
    }
    for t in threads {
        common::thread_within(t, 5);
    }
}

/// A SIGINT before a wait's first poll does not complete it.
fn signal_before_poll_not_counted() {
    use common::signal::{install_handler, raise, raise_until};
    install_handler();
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    // A first wait sees a SIGINT (so it is published).
    let first = rt.spawn(weft::signal::ctrl_c());
    raise_until("the first waiter", || first.is_finished());
    rt.block_on(first).unwrap().unwrap();
    // A future created before another SIGINT but polled after it waits on.
    let late = weft::signal::ctrl_c();
    raise();
    std::thread::sleep(ms(50));
    let (h, polled) = {
        let polled = Arc::new(AtomicBool::new(false));
        let p = polled.clone();
        let h = rt.spawn(async move {
            let mut f = pin!(late);
            std::future::poll_fn(|cx| {
                let r = f.as_mut().poll(cx);
                p.store(true, SeqCst);
                r
            })
            .await
        });
        (h, polled)
    };
    common::wait_until("the late wait polled", || polled.load(SeqCst));
    std::thread::sleep(ms(100));
    assert!(!h.is_finished(), "a SIGINT before the first poll counted");
    raise_until("the late waiter", || h.is_finished());
    rt.block_on(h).unwrap().unwrap();
}

/// A wait on a runtime ends with an error when that runtime is dropped, in a task, a
/// fiber and a blocking closure; a plain thread's wait still ends on SIGINT.
fn signal_runtime_dropped() {
    use common::signal::{install_handler, raise_until};
    install_handler();
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    for _ in 0..3 {
        let tx = tx.clone();
        rt.spawn(async move {
            let _ = tx.send(weft::signal::ctrl_c().await);
        });
    }
    for _ in 0..2 {
        let tx = tx.clone();
        rt.block_on(async {
            weft::fiber::spawn(move || {
                let _ = tx.send(weft::signal::ctrl_c_blocking());
            })
        });
    }
    let thread_done = Arc::new(AtomicBool::new(false));
    let td = thread_done.clone();
    let t = std::thread::spawn(move || {
        weft::signal::ctrl_c_blocking().unwrap();
        td.store(true, SeqCst);
    });
    std::thread::sleep(ms(50));
    let start = Instant::now();
    drop(rt);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "runtime drop hung"
    );
    drop(tx);
    let mut results = Vec::new();
    while let Ok(r) = rx.recv_timeout(Duration::from_secs(5)) {
        results.push(r);
    }
    // Task waits are dropped by the shutdown (nothing sent); the fibers' waits end
    // with an error. None may report a Ctrl-C that never came.
    assert!(results.iter().all(|r| r.is_err()), "{results:?}");
    raise_until("the plain thread", || thread_done.load(SeqCst));
    common::thread_within(t, 5);
}

/// Many short waits created and dropped while SIGINTs arrive: no panic, and a final
/// waiter still completes.
fn signal_churn() {
    use common::signal::{install_handler, raise, raise_until};
    install_handler();
    let rt = weft::Builder::new().worker_threads(3).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let raiser = std::thread::spawn(move || {
        while !s.load(SeqCst) {
            raise();
            std::thread::sleep(ms(1));
        }
    });
    let completed = rt.block_on(async {
        let mut hs = Vec::new();
        for i in 0..8 {
            hs.push(weft::spawn(async move {
                let mut ok = 0;
                for j in 0..200 {
                    let d = ms(((i + j) % 3) as u64);
                    if let Ok(r) = weft::time::timeout(d, weft::signal::ctrl_c()).await {
                        r.unwrap();
                        ok += 1;
                    }
                }
                ok
            }));
        }
        let mut total = 0;
        for h in hs {
            total += h.await.unwrap();
        }
        total
    });
    stop.store(true, SeqCst);
    raiser.join().unwrap();
    assert!(completed > 0);
    let last = rt.spawn(weft::signal::ctrl_c());
    raise_until("the last waiter", || last.is_finished());
    rt.block_on(last).unwrap().unwrap();
}

#[test]
fn ctrl_c_polled_then_dropped_then_many_waiters() {
    watchdog(20, || run_child("dropped_then_many"));
}

#[test]
fn ctrl_c_sigint_before_first_poll_not_counted() {
    watchdog(20, || run_child("before_poll_not_counted"));
}

#[test]
fn ctrl_c_waits_end_when_their_runtime_drops() {
    watchdog(20, || run_child("runtime_dropped"));
}

#[test]
fn ctrl_c_churn_under_a_stream_of_sigints() {
    watchdog(20, || run_child("churn"));
}

// ---------------------------------------------------------------------------------
// hyper
// ---------------------------------------------------------------------------------

#[cfg(feature = "hyper")]
mod hyper_glue {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper::rt::{Read as _, ReadBuf, Timer};
    use hyper::{Request, Response};
    use std::mem::MaybeUninit;
    use weft::hyper::{WeftExecutor, WeftIo, WeftTimer};

    async fn echo(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let body = req.into_body().collect().await?.to_bytes();
        Ok(Response::new(Full::new(body)))
    }

    fn timers(rt: &weft::Runtime) -> usize {
        rt.stats().timers_pending
    }

    fn wait_timers_zero(rt: &weft::Runtime) {
        for _ in 0..2000 {
            if timers(rt) == 0 {
                return;
            }
            std::thread::sleep(ms(1));
        }
        panic!("timers_pending stuck at {}", timers(rt));
    }

    #[test]
    fn weft_io_lying_reader_panics_not_ub() {
        // Documented by the code as an assert: a reader claiming more than the slice
        // it was given is a panic, never an advance over uninitialized memory.
        struct Liar;
        impl AsyncRead for Liar {
            fn poll_read(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(Ok(buf.len() + 1))
            }
        }
        let mut io = WeftIo::new(Liar);
        let mut storage = [MaybeUninit::<u8>::uninit(); 4096];
        let mut rb = ReadBuf::uninit(&mut storage);
        let r = catch_unwind(AssertUnwindSafe(|| {
            Pin::new(&mut io).poll_read(&mut noop_cx(), rb.unfilled())
        }));
        assert!(r.is_err());
        assert!(rb.filled().is_empty());
    }

    #[test]
    fn weft_io_zero_room_and_tiny_room() {
        let mut io = WeftIo::new(Script::new([Step::Data(b"abcdef".to_vec())]));
        let mut none: [MaybeUninit<u8>; 0] = [];
        let mut rb = ReadBuf::uninit(&mut none);
        let r = Pin::new(&mut io).poll_read(&mut noop_cx(), rb.unfilled());
        assert!(matches!(r, Poll::Ready(Ok(()))));
        let mut storage = [MaybeUninit::<u8>::uninit(); 4];
        let mut rb = ReadBuf::uninit(&mut storage);
        let r = Pin::new(&mut io).poll_read(&mut noop_cx(), rb.unfilled());
        assert!(matches!(r, Poll::Ready(Ok(()))));
        assert_eq!(rb.filled(), b"abcd");
        // The reader saw nothing but zeroes (initialized memory) as its buffer; and the
        // rest is still there.
        let mut rb = ReadBuf::uninit(&mut storage);
        let _ = Pin::new(&mut io).poll_read(&mut noop_cx(), rb.unfilled());
        assert_eq!(rb.filled(), b"ef");
    }

    /// A server on `listener` serving echo, one task per connection, until dropped.
    fn serve_tcp(listener: weft::net::TcpListener) -> weft::JoinHandle<()> {
        weft::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                weft::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(WeftTimer::new())
                        .serve_connection(WeftIo::new(s), hyper::service::service_fn(echo))
                        .await;
                });
            }
        })
    }

    #[test]
    fn client_and_server_over_tcp_big_bodies_and_keepalive() {
        let rt = workers(3);
        watchdog(20, move || {
            rt.block_on(async {
                let l = weft::net::TcpListener::bind(common::loopback())
                    .await
                    .unwrap();
                let addr = l.local_addr().unwrap();
                let server = serve_tcp(l);
                let s = weft::net::TcpStream::connect(addr).await.unwrap();
                let (mut tx, conn) = hyper::client::conn::http1::Builder::new()
                    .handshake(WeftIo::new(s))
                    .await
                    .unwrap();
                hyper::rt::Executor::execute(&WeftExecutor::new(), async move {
                    let _ = conn.await;
                });
                for size in [0usize, 1, 1023, 1024, 1025, 70_000, 3 << 20] {
                    let body: Vec<u8> = (0..size).map(|i| (i * 7 % 256) as u8).collect();
                    let req = Request::post("/")
                        .body(Full::new(Bytes::from(body.clone())))
                        .unwrap();
                    tx.ready().await.unwrap();
                    let res = tx.send_request(req).await.unwrap();
                    assert_eq!(res.status(), 200);
                    let got = res.into_body().collect().await.unwrap().to_bytes();
                    assert!(got[..] == body[..], "size {size}: body differs");
                }
                server.abort();
            });
            wait_timers_zero(&rt);
        });
    }

    #[test]
    fn client_and_server_over_unix_streams() {
        let rt = workers(2);
        watchdog(20, move || {
            let dir = common::net::TempDir::new("s40io");
            let path = dir.path("h.sock");
            rt.block_on(async {
                let l = weft::net::UnixListener::bind(&path).unwrap();
                let server = weft::spawn(async move {
                    let (s, _) = l.accept().await.unwrap();
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(WeftIo::new(s), hyper::service::service_fn(echo))
                        .await
                });
                let s = weft::net::UnixStream::connect(&path).await.unwrap();
                let (mut tx, conn) = hyper::client::conn::http1::handshake(WeftIo::new(s))
                    .await
                    .unwrap();
                let driver = weft::spawn(conn);
                for i in 0..50usize {
                    let body = vec![i as u8; i * 997];
                    let req = Request::post("/")
                        .body(Full::new(Bytes::from(body.clone())))
                        .unwrap();
                    tx.ready().await.unwrap();
                    let res = tx.send_request(req).await.unwrap();
                    let got = res.into_body().collect().await.unwrap().to_bytes();
                    assert_eq!(got.len(), body.len());
                    assert!(got[..] == body[..]);
                }
                drop(tx);
                // Dropping the sender ends the client connection; the server sees end of
                // stream and ends cleanly.
                weft::time::timeout(Duration::from_secs(5), driver)
                    .await
                    .expect("client conn hung")
                    .unwrap()
                    .unwrap();
                weft::time::timeout(Duration::from_secs(5), server)
                    .await
                    .expect("server conn hung")
                    .unwrap()
                    .unwrap();
            });
        });
    }

    /// A server connection on `rt` for one accepted std client; returns the client and
    /// the connection's join handle (its result).
    fn one_conn(
        rt: &weft::Runtime,
        builder: hyper::server::conn::http1::Builder,
    ) -> (
        std::net::TcpStream,
        weft::JoinHandle<Result<(), hyper::Error>>,
    ) {
        let (w, peer) = common::net::weft_and_std(rt);
        let h = rt.spawn(async move {
            builder
                .serve_connection(WeftIo::new(w), hyper::service::service_fn(echo))
                .await
        });
        (peer, h)
    }

    fn finish<T: Send + 'static>(rt: &weft::Runtime, h: weft::JoinHandle<T>) -> T {
        rt.block_on(weft::time::timeout(Duration::from_secs(5), h))
            .expect("hang: the connection never ended")
            .unwrap()
    }

    #[test]
    fn reset_mid_request_body_ends_the_connection_with_an_error() {
        let rt = workers(2);
        watchdog(20, move || {
            let (mut peer, h) = one_conn(&rt, hyper::server::conn::http1::Builder::new());
            peer.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabcdef")
                .unwrap();
            std::thread::sleep(ms(30));
            common::net::linger_zero(std::os::fd::AsRawFd::as_raw_fd(&peer));
            drop(peer);
            assert!(finish(&rt, h).is_err());
        });
    }

    #[test]
    fn reset_mid_request_head_ends_the_connection() {
        let rt = workers(2);
        watchdog(20, move || {
            let (mut peer, h) = one_conn(&rt, hyper::server::conn::http1::Builder::new());
            peer.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
            std::thread::sleep(ms(30));
            common::net::linger_zero(std::os::fd::AsRawFd::as_raw_fd(&peer));
            drop(peer);
            let _ = finish(&rt, h);
        });
    }

    #[test]
    fn half_close_after_the_request_still_gets_the_response() {
        let rt = workers(2);
        watchdog(20, move || {
            let (mut peer, h) = one_conn(
                &rt,
                hyper::server::conn::http1::Builder::new()
                    .half_close(true)
                    .clone(),
            );
            peer.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
                .unwrap();
            peer.shutdown(std::net::Shutdown::Write).unwrap();
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut resp = Vec::new();
            peer.read_to_end(&mut resp).unwrap();
            let resp = String::from_utf8(resp).unwrap();
            assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
            assert!(resp.ends_with("\r\n\r\nhello"), "{resp}");
            finish(&rt, h).unwrap();
        });
    }

    #[test]
    fn client_sees_server_half_close_and_reset() {
        // The server side is a plain std socket: it answers one request and then resets
        // during the second one. The weft client must end with errors, not hang.
        let rt = workers(2);
        watchdog(20, move || {
            let l = std::net::TcpListener::bind(common::loopback()).unwrap();
            let addr = l.local_addr().unwrap();
            let t = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0);
                    seen.extend_from_slice(&buf[..n]);
                }
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .unwrap();
                // Second request: half a response, then a reset.
                let _ = s.read(&mut buf);
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
                    .unwrap();
                std::thread::sleep(ms(30));
                common::net::linger_zero(std::os::fd::AsRawFd::as_raw_fd(&s));
            });
            rt.block_on(async {
                let s = weft::net::TcpStream::connect(addr).await.unwrap();
                let (mut tx, conn) =
                    hyper::client::conn::http1::handshake::<_, Full<Bytes>>(WeftIo::new(s))
                        .await
                        .unwrap();
                let driver = weft::spawn(conn);
                let res = tx
                    .send_request(Request::get("/").body(Full::default()).unwrap())
                    .await
                    .unwrap();
                let b = res.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&b[..], b"ok");
                tx.ready().await.unwrap();
                let res = weft::time::timeout(
                    Duration::from_secs(5),
                    tx.send_request(Request::get("/").body(Full::default()).unwrap()),
                )
                .await
                .expect("hang: request on a reset connection");
                // The head came before the reset: the body must fail, not hang.
                if let Ok(res) = res {
                    let r = weft::time::timeout(Duration::from_secs(5), res.into_body().collect())
                        .await
                        .expect("hang: body of a reset connection");
                    assert!(r.is_err());
                }
                let r = weft::time::timeout(Duration::from_secs(5), driver)
                    .await
                    .expect("hang: client connection of a reset socket");
                let _ = r;
            });
            common::thread_within(t, 5);
        });
    }

    #[test]
    fn connection_future_dropped_on_another_thread() {
        let rt = workers(2);
        watchdog(20, move || {
            let (w, mut peer) = common::net::weft_and_std(&rt);
            let mut conn = Box::pin(
                hyper::server::conn::http1::Builder::new()
                    .timer(WeftTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(WeftIo::new(w), hyper::service::service_fn(echo)),
            );
            peer.write_all(b"GET / HTTP/1.1\r\nHost").unwrap();
            // Polled on the runtime until it waits (with the header timer filed).
            rt.block_on(async {
                assert!(weft::time::timeout(ms(50), conn.as_mut()).await.is_err());
            });
            assert!(timers(&rt) >= 1, "the header read timer is not pending");
            // Dropped on a plain thread.
            std::thread::spawn(move || drop(conn)).join().unwrap();
            wait_timers_zero(&rt);
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            // The socket closed with the future: end of stream (or a reset).
            let _ = peer.read_to_end(&mut rest);
            assert!(rest.is_empty());
        });
    }

    #[test]
    fn connection_future_dropped_inside_another_runtime() {
        let rt = workers(2);
        let other = workers(1);
        watchdog(20, move || {
            let (w, mut peer) = common::net::weft_and_std(&rt);
            let mut conn = Box::pin(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(WeftIo::new(w), hyper::service::service_fn(echo)),
            );
            rt.block_on(async {
                assert!(weft::time::timeout(ms(20), conn.as_mut()).await.is_err());
            });
            // Polled to completion on another runtime: the socket stays `rt`'s.
            peer.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            other
                .block_on(weft::time::timeout(Duration::from_secs(5), conn))
                .expect("hang on another runtime")
                .unwrap();
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut resp = Vec::new();
            peer.read_to_end(&mut resp).unwrap();
            assert!(resp.starts_with(b"HTTP/1.1 200 OK"));
        });
    }

    #[test]
    fn runtime_dropped_while_the_server_waits() {
        watchdog(20, || {
            let rt = workers(2);
            let (mut peer, h) = one_conn(
                &rt,
                hyper::server::conn::http1::Builder::new()
                    .timer(WeftTimer::new())
                    .header_read_timeout(Duration::from_secs(60))
                    .clone(),
            );
            peer.write_all(b"GET / HT").unwrap();
            std::thread::sleep(ms(50));
            let start = Instant::now();
            drop(h);
            drop(rt);
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "runtime drop hung"
            );
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            match peer.read_to_end(&mut rest) {
                Ok(_) => assert!(rest.is_empty()),
                Err(e) => assert_ne!(e.kind(), io::ErrorKind::WouldBlock, "socket left open"),
            }
        });
    }

    #[test]
    fn runtime_dropped_while_a_client_request_waits() {
        // The client connection runs on `rt`; the request is awaited from another
        // runtime; `rt` goes: the request ends with an error.
        watchdog(20, || {
            let rt = workers(2);
            let waiter = workers(1);
            let l = std::net::TcpListener::bind(common::loopback()).unwrap();
            let addr = l.local_addr().unwrap();
            let mut tx = rt.block_on(async move {
                let s = weft::net::TcpStream::connect(addr).await.unwrap();
                let (tx, conn) =
                    hyper::client::conn::http1::handshake::<_, Full<Bytes>>(WeftIo::new(s))
                        .await
                        .unwrap();
                weft::spawn(conn);
                tx
            });
            let (_server_side, _) = l.accept().unwrap();
            let fut = tx.send_request(Request::get("/").body(Full::default()).unwrap());
            let res = std::thread::spawn(move || {
                waiter.block_on(weft::time::timeout(Duration::from_secs(8), fut))
            });
            std::thread::sleep(ms(50));
            let start = Instant::now();
            drop(rt);
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "runtime drop hung"
            );
            let r = common::thread_within(res, 10).expect("hang: the request outlived its conn");
            assert!(r.is_err());
        });
    }

    #[test]
    fn header_read_timeout_fires_and_timers_return_to_zero() {
        let rt = workers(2);
        watchdog(20, move || {
            let builder = hyper::server::conn::http1::Builder::new()
                .timer(WeftTimer::new())
                .header_read_timeout(ms(150))
                .clone();
            // Nothing sent at all.
            let (_p1, h1) = one_conn(&rt, builder.clone());
            // Half a head.
            let (mut p2, h2) = one_conn(&rt, builder.clone());
            p2.write_all(b"GET / HTTP/1.1\r\n").unwrap();
            // One full request on a kept-alive connection, then half a second head.
            let (mut p3, h3) = one_conn(&rt, builder);
            p3.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            p3.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 1024];
            let n = p3.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
            p3.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
            let start = Instant::now();
            for h in [h1, h2, h3] {
                let _ = finish(&rt, h);
            }
            assert!(start.elapsed() < Duration::from_secs(3));
            wait_timers_zero(&rt);
        });
    }

    #[test]
    fn weft_timer_sleeps_reset_and_dropped_on_other_threads() {
        let rt = workers(2);
        watchdog(20, move || {
            let timer = WeftTimer::new();
            let sleeps: Vec<_> = rt.block_on(async {
                let mut v = Vec::new();
                for i in 0..64u64 {
                    let mut s = timer.sleep(Duration::from_secs(60 + i));
                    // Filed on the wheel.
                    assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
                    v.push(s);
                }
                v
            });
            assert_eq!(timers(&rt), 64);
            let mut threads = Vec::new();
            for (i, mut s) in sleeps.into_iter().enumerate() {
                threads.push(std::thread::spawn(move || {
                    let t = WeftTimer::new();
                    match i % 4 {
                        // Reset on a plain thread, then dropped.
                        0 => {
                            t.reset(&mut s, Instant::now() + Duration::from_secs(30));
                            drop(s);
                        }
                        // Reset to the past and polled here: ready.
                        1 => {
                            t.reset(&mut s, Instant::now() - ms(1));
                            assert!(poll_once(s.as_mut(), Waker::noop()).is_ready());
                        }
                        // Reset to soon, polled (refiled), then dropped.
                        2 => {
                            t.reset(&mut s, Instant::now() + ms(5));
                            let _ = poll_once(s.as_mut(), Waker::noop());
                            drop(s);
                        }
                        // Reset many times, then left to fire: waits here.
                        _ => {
                            for k in 0..10 {
                                t.reset(&mut s, Instant::now() + ms(100 - k * 9));
                                let _ = poll_once(s.as_mut(), Waker::noop());
                            }
                            let start = Instant::now();
                            while poll_once(s.as_mut(), Waker::noop()).is_pending() {
                                assert!(start.elapsed() < Duration::from_secs(5));
                                std::thread::sleep(ms(1));
                            }
                        }
                    }
                }));
            }
            for t in threads {
                common::thread_within(t, 10);
            }
            wait_timers_zero(&rt);
        });
    }

    #[test]
    fn weft_timer_reset_while_a_task_waits_on_it() {
        // A task waits on a sleep held in a shared slot; another thread resets it
        // earlier. (Documented: a reset sleep wakes nobody until polled again; hyper
        // polls after each reset. Here the waiter re-polls every 10 ms.)
        let rt = workers(2);
        watchdog(20, move || {
            let slot =
                Arc::new(std::sync::Mutex::new(rt.block_on(async {
                    WeftTimer::new().sleep(Duration::from_secs(60))
                })));
            let s2 = slot.clone();
            let h = rt.spawn(async move {
                loop {
                    let done = std::future::poll_fn(|cx| {
                        Poll::Ready(s2.lock().unwrap().as_mut().poll(cx).is_ready())
                    })
                    .await;
                    if done {
                        return;
                    }
                    weft::time::sleep(ms(10)).await;
                }
            });
            std::thread::sleep(ms(30));
            WeftTimer::new().reset(&mut slot.lock().unwrap(), Instant::now() + ms(20));
            finish(&rt, h);
            drop(slot);
            wait_timers_zero(&rt);
        });
    }

    #[test]
    fn weft_timer_sleep_reset_after_its_runtime_is_gone() {
        watchdog(20, || {
            let rt = workers(1);
            let timer = WeftTimer::new();
            let mut s = rt.block_on(async { timer.sleep(Duration::from_secs(60)) });
            assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
            drop(rt);
            // Reset and polled on a plain thread after the runtime's drop: it still
            // ends at its new deadline (the alarm thread), and never early.
            let start = Instant::now();
            timer.reset(&mut s, start + ms(30));
            let t = std::thread::spawn(move || {
                let done = Arc::new(AtomicBool::new(false));
                struct Flag(Arc<AtomicBool>);
                impl std::task::Wake for Flag {
                    fn wake(self: Arc<Self>) {
                        self.0.store(true, SeqCst);
                    }
                }
                let w = Waker::from(Arc::new(Flag(done.clone())));
                while poll_once(s.as_mut(), &w).is_pending() {
                    // Woken, not polled in a loop: wait for the wake (bounded).
                    let t0 = Instant::now();
                    while !done.swap(false, SeqCst) {
                        assert!(t0.elapsed() < Duration::from_secs(5), "hang: never woken");
                        std::thread::sleep(ms(1));
                    }
                }
                Instant::now()
            });
            let end = common::thread_within(t, 10);
            assert!(end - start >= ms(30), "fired early: {:?}", end - start);
        });
    }

    #[test]
    fn executor_runs_detached_futures_and_timers_count() {
        let rt = workers(2);
        watchdog(20, move || {
            let done = Arc::new(AtomicUsize::new(0));
            rt.block_on(async {
                for i in 0..100u64 {
                    let d = done.clone();
                    hyper::rt::Executor::execute(&WeftExecutor::new(), async move {
                        WeftTimer::new().sleep(ms(i % 7)).await;
                        d.fetch_add(1, SeqCst);
                    });
                }
            });
            common::wait_until("every detached future", || done.load(SeqCst) == 100);
            wait_timers_zero(&rt);
        });
    }
}
