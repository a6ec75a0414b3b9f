//! The `net` suite (issue 17): a TCP echo over loopback, round trips per second.
//!
//! One shape for every contender: a server accepting `conns` connections and echoing
//! each (one task, fiber or coroutine per connection, reading into a 16 KiB buffer
//! and writing back what it read), and `conns` clients. Each client connects
//! (`TCP_NODELAY` on both ends), warms up with a tenth of its round trips, waits at a
//! barrier until every client has, and then does its round trips of one message
//! (64 B or 16 KiB): write it whole, read the echo whole, compare. The time runs from
//! the barrier's release to the last client's end; every echoed byte is counted and
//! every echo compared, so a broken runtime fails instead of giving a fast figure.
//! Clients and server run in the same runtime, with `--workers` workers.
//!
//! * `tasks_*`: async tasks, weft (`weft::net`, no interactive pool) against tokio
//!   (`tokio::net`, a multi-thread runtime with its I/O driver).
//! * `fibers_*`: blocking style, weft fibers (`weft::net` with `std::io::Read` and
//!   `Write`) against may coroutines (`may::net`); each measurement in a fresh child
//!   process (may keeps one scheduler per process).
//!
//! For a smoke test, `WEFT_BENCH_NET_SCALE=N` divides every round-trip count by N.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{Case, Metric, Options, Suite, Unit};
use crate::runtimes::Weft;

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &["weft", "tokio", "may"];
const WEFT: usize = 0;
const TOKIO: usize = 1;
const MAY: usize = 2;

/// The hidden first argument that makes this binary run one `fibers_*` measurement
/// as a child process (see [`child_main`]).
pub const CHILD_ARG: &str = "__net-child";
/// The child's result line starts with this, followed by ns per round trip.
const RESULT_PREFIX: &str = "NET-RESULT";
/// Divides every round-trip count, for smoke tests.
const SCALE_ENV: &str = "WEFT_BENCH_NET_SCALE";
/// The servers' read buffer.
const BUF: usize = 16 * 1024;

/// What `net --help` prints above the options.
pub const HELP: &str = "\
TCP echo over loopback: a server echoing each of `conns` connections (one task, fiber or
  coroutine per connection, 16 KiB read buffer) and `conns` clients, each writing a message
  (64 B or 16 KiB) whole and reading its echo whole, for a fixed count of round trips
  (after a tenth as many untimed, and a barrier so that all start together). TCP_NODELAY on
  both ends; clients and server in one runtime of --workers workers. Figures: wall time per
  round trip (all connections together: the inverse of the rate) and round trips per second.
tasks_*: async tasks, weft (weft::net, no interactive pool) vs tokio (tokio::net).
fibers_*: blocking style, weft fibers (weft::net, std::io::Read/Write) vs may coroutines
  (may::net), each measurement in a fresh child process.
Every echo is compared and every echoed byte counted.
WEFT_BENCH_NET_SCALE=N divides every round-trip count by N (smoke tests).";

/// How the contenders run their clients and servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Async tasks: weft against tokio.
    Tasks,
    /// Blocking style: weft fibers against may coroutines.
    Fibers,
}

/// A case: the way, the message size and the number of connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetCase {
    pub way: Way,
    pub size: usize,
    pub conns: usize,
}

impl NetCase {
    /// Every case, in the order they run.
    pub fn all() -> Vec<NetCase> {
        let mut v = Vec::new();
        for way in [Way::Tasks, Way::Fibers] {
            for size in [64, 16 * 1024] {
                for conns in [1, 100] {
                    v.push(NetCase { way, size, conns });
                }
            }
        }
        v
    }

    pub fn name(self) -> String {
        let way = match self.way {
            Way::Tasks => "tasks",
            Way::Fibers => "fibers",
        };
        let size = if self.size >= 1024 {
            format!("{}k", self.size / 1024)
        } else {
            format!("{}b", self.size)
        };
        format!("{way}_{size}_{}conn", self.conns)
    }

    pub fn parse(name: &str) -> Option<NetCase> {
        NetCase::all().into_iter().find(|c| c.name() == name)
    }

    /// Round trips per connection in a timed run, before [`SCALE_ENV`]: some
    /// 100-500 ms a run on a 2-core machine.
    fn base_rounds(self) -> usize {
        match (self.size, self.conns) {
            (64, 1) => 20_000,
            (64, _) => 500,
            (_, 1) => 5_000,
            _ => 100,
        }
    }

    /// Round trips per connection in a timed run.
    pub fn rounds(self) -> usize {
        (self.base_rounds() / scale()).max(1)
    }

    /// Whether contender `who` takes part.
    fn takes_part(self, who: usize) -> bool {
        match self.way {
            Way::Tasks => matches!(who, WEFT | TOKIO),
            Way::Fibers => matches!(who, WEFT | MAY),
        }
    }
}

/// Untimed round trips per connection before the timed ones.
fn warm_up(rounds: usize) -> usize {
    (rounds / 10).max(1)
}

fn scale() -> usize {
    std::env::var(SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&d| d > 0)
        .unwrap_or(1)
}

/// Client `i`'s message: its own bytes, so an echo from another connection shows.
fn message(i: usize, size: usize) -> Vec<u8> {
    (0..size).map(|k| (i * 131 + k * 7) as u8).collect()
}

/// Bytes the servers together echo in a run of `c` with `rounds` timed round trips
/// per connection.
fn echoed_bytes(c: NetCase, rounds: usize) -> usize {
    c.conns * (rounds + warm_up(rounds)) * c.size
}

// ---------------------------------------------------------------- suite ----

/// The `net` suite.
pub fn suite(_opts: &Options) -> Suite {
    let mut cases = Vec::new();
    for c in NetCase::all() {
        let name = c.name();
        cases.push(Case::new(
            &name,
            vec![
                Metric::new("time", "round trip", Unit::Ns),
                Metric::new("rate", "second", Unit::Rate),
            ],
            move |who, opts| {
                let ns = measure(c, who, opts.workers);
                vec![ns, 1e9 / ns]
            },
        ));
    }
    let mut notes = vec![
        "TCP echo over loopback, clients and server in one runtime; time: wall time per round \
         trip over all connections (the inverse of the rate); rate: round trips per second"
            .to_string(),
        "tasks_*: weft vs tokio (tasks, weft::net / tokio::net); fibers_*: weft fibers vs may \
         coroutines (blocking style), child process per measurement"
            .to_string(),
    ];
    if scale() != 1 {
        notes.push(format!(
            "{SCALE_ENV}={}: every round-trip count divided by it",
            scale()
        ));
    }
    Suite {
        command: "net",
        contenders: CONTENDERS,
        cases,
        notes,
        baseline: None,
        // The issue sets no target: the ratios are the report.
        checks: Vec::new(),
    }
}

/// Measures case `c` on contender `who`: ns per round trip (all connections
/// together), or NaN where it does not take part.
fn measure(c: NetCase, who: usize, workers: usize) -> f64 {
    if !c.takes_part(who) {
        return f64::NAN;
    }
    let elapsed = match (c.way, who) {
        (Way::Tasks, WEFT) => weft_tasks(c, workers, c.rounds()),
        (Way::Tasks, TOKIO) => tokio_tasks(c, workers, c.rounds()),
        (Way::Fibers, _) => return run_child(c, who, workers),
        _ => unreachable!("{} takes no part in {}", CONTENDERS[who], c.name()),
    };
    ns_per_round_trip(c, elapsed)
}

fn ns_per_round_trip(c: NetCase, elapsed: Duration) -> f64 {
    elapsed.as_nanos() as f64 / (c.conns * c.rounds()) as f64
}

/// The weft fibers of case `c` on a fresh weft runtime (made current, so that every
/// socket and fiber goes to it).
fn weft_fibers(c: NetCase, workers: usize, rounds: usize) -> Duration {
    let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
    let elapsed = rt
        .runtime()
        .block_on(async move { fibers::<WeftFibers>(c, rounds) });
    drop(rt);
    elapsed
}

// ---------------------------------------------------------------- tasks ----

/// weft tasks: `weft::net` on a weft runtime of `workers` workers, no interactive
/// pool.
fn weft_tasks(c: NetCase, workers: usize, rounds: usize) -> Duration {
    use weft::io::{AsyncReadExt, AsyncWriteExt};
    let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
    let NetCase { size, conns, .. } = c;
    let (elapsed, echoed) = rt.runtime().block_on(async move {
        let l = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = weft::spawn(async move {
            let mut conns_h = Vec::with_capacity(conns);
            for _ in 0..conns {
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                conns_h.push(weft::spawn(async move {
                    let mut buf = vec![0u8; BUF];
                    let mut echoed = 0;
                    loop {
                        let n = s.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return echoed;
                        }
                        s.write_all(&buf[..n]).await.unwrap();
                        echoed += n;
                    }
                }));
            }
            let mut echoed = 0;
            for h in conns_h {
                echoed += h.await.unwrap();
            }
            echoed
        });
        let barrier = Arc::new(weft::sync::Barrier::new(conns + 1));
        let clients: Vec<_> = (0..conns)
            .map(|i| {
                let barrier = barrier.clone();
                weft::spawn(async move {
                    let mut s = weft::net::TcpStream::connect(addr).await.unwrap();
                    s.set_nodelay(true).unwrap();
                    let msg = message(i, size);
                    let mut back = vec![0u8; size];
                    for round in 0..warm_up(rounds) + rounds {
                        if round == warm_up(rounds) {
                            barrier.wait().await;
                        }
                        s.write_all(&msg).await.unwrap();
                        s.read_exact(&mut back).await.unwrap();
                        assert!(back == msg, "client {i}: a wrong echo");
                    }
                    weft::io::AsyncWriteExt::shutdown(&mut s).await.unwrap();
                })
            })
            .collect();
        barrier.wait().await;
        let start = Instant::now();
        for h in clients {
            h.await.unwrap();
        }
        let elapsed = start.elapsed();
        (elapsed, server.await.unwrap())
    });
    assert_eq!(echoed, echoed_bytes(c, rounds), "bytes echoed");
    drop(rt);
    elapsed
}

/// tokio tasks: `tokio::net` on a multi-thread runtime of `workers` workers.
fn tokio_tasks(c: NetCase, workers: usize, rounds: usize) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tokio-bench-worker")
        .enable_all()
        .build()
        .expect("cannot build tokio");
    let NetCase { size, conns, .. } = c;
    let (elapsed, echoed) = rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut conns_h = Vec::with_capacity(conns);
            for _ in 0..conns {
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                conns_h.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; BUF];
                    let mut echoed = 0;
                    loop {
                        let n = s.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return echoed;
                        }
                        s.write_all(&buf[..n]).await.unwrap();
                        echoed += n;
                    }
                }));
            }
            let mut echoed = 0;
            for h in conns_h {
                echoed += h.await.unwrap();
            }
            echoed
        });
        let barrier = Arc::new(tokio::sync::Barrier::new(conns + 1));
        let clients: Vec<_> = (0..conns)
            .map(|i| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                    s.set_nodelay(true).unwrap();
                    let msg = message(i, size);
                    let mut back = vec![0u8; size];
                    for round in 0..warm_up(rounds) + rounds {
                        if round == warm_up(rounds) {
                            barrier.wait().await;
                        }
                        s.write_all(&msg).await.unwrap();
                        s.read_exact(&mut back).await.unwrap();
                        assert!(back == msg, "client {i}: a wrong echo");
                    }
                    s.shutdown().await.unwrap();
                })
            })
            .collect();
        barrier.wait().await;
        let start = Instant::now();
        for h in clients {
            h.await.unwrap();
        }
        let elapsed = start.elapsed();
        (elapsed, server.await.unwrap())
    });
    assert_eq!(echoed, echoed_bytes(c, rounds), "bytes echoed");
    drop(rt);
    elapsed
}

// --------------------------------------------------------------- fibers ----

/// The blocking side of a contender: spawning its green threads and the sockets
/// they use.
trait Green {
    type Stream: std::io::Read + std::io::Write + Send + 'static;
    type Listener: Send + 'static;
    type Barrier: Send + Sync + 'static;
    type Join<T: Send + 'static>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Join<T>;
    fn join<T: Send + 'static>(h: Self::Join<T>) -> T;
    fn bind() -> (Self::Listener, SocketAddr);
    fn accept(l: &Self::Listener) -> Self::Stream;
    fn connect(addr: SocketAddr) -> Self::Stream;
    fn shutdown_write(s: &Self::Stream);
    fn barrier(n: usize) -> Self::Barrier;
    fn wait(b: &Self::Barrier);
}

/// weft fibers with `weft::net`, run inside the runtime's `block_on` (see
/// [`weft_fibers`]).
struct WeftFibers;

impl Green for WeftFibers {
    type Stream = weft::net::TcpStream;
    type Listener = weft::net::TcpListener;
    type Barrier = weft::sync::Barrier;
    type Join<T: Send + 'static> = weft::JoinHandle<T>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Join<T> {
        weft::fiber::spawn(f)
    }
    fn join<T: Send + 'static>(h: Self::Join<T>) -> T {
        h.join().expect("a weft fiber failed")
    }
    fn bind() -> (Self::Listener, SocketAddr) {
        let l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }
    fn accept(l: &Self::Listener) -> Self::Stream {
        let (s, _) = l.accept_blocking().unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
    fn connect(addr: SocketAddr) -> Self::Stream {
        let s = weft::net::TcpStream::connect_blocking(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
    fn shutdown_write(s: &Self::Stream) {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    fn barrier(n: usize) -> Self::Barrier {
        weft::sync::Barrier::new(n)
    }
    fn wait(b: &Self::Barrier) {
        b.wait_blocking();
    }
}

/// may coroutines with `may::net`.
struct MayCoroutines;

impl Green for MayCoroutines {
    type Stream = may::net::TcpStream;
    type Listener = may::net::TcpListener;
    type Barrier = may::sync::Barrier;
    type Join<T: Send + 'static> = may::coroutine::JoinHandle<T>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Join<T> {
        // SAFETY: the closures keep no thread-local across a suspension, and their
        // buffers are on the heap, far from the coroutine stack's limit.
        unsafe { may::coroutine::spawn(f) }
    }
    fn join<T: Send + 'static>(h: Self::Join<T>) -> T {
        h.join().expect("a may coroutine failed")
    }
    fn bind() -> (Self::Listener, SocketAddr) {
        let l = may::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }
    fn accept(l: &Self::Listener) -> Self::Stream {
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
    fn connect(addr: SocketAddr) -> Self::Stream {
        let s = may::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
    fn shutdown_write(s: &Self::Stream) {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    fn barrier(n: usize) -> Self::Barrier {
        may::sync::Barrier::new(n)
    }
    fn wait(b: &Self::Barrier) {
        b.wait();
    }
}

/// The blocking-style echo of case `c` on `G`; returns the timed part's duration.
fn fibers<G: Green>(c: NetCase, rounds: usize) -> Duration {
    use std::io::{Read, Write};
    let NetCase { size, conns, .. } = c;
    let (l, addr) = G::bind();
    let server = G::spawn(move || {
        let handles: Vec<_> = (0..conns)
            .map(|_| {
                let mut s = G::accept(&l);
                G::spawn(move || {
                    let mut buf = vec![0u8; BUF];
                    let mut echoed = 0;
                    loop {
                        let n = s.read(&mut buf).unwrap();
                        if n == 0 {
                            return echoed;
                        }
                        s.write_all(&buf[..n]).unwrap();
                        echoed += n;
                    }
                })
            })
            .collect();
        handles.into_iter().map(G::join).sum::<usize>()
    });
    let barrier = Arc::new(G::barrier(conns + 1));
    let clients: Vec<_> = (0..conns)
        .map(|i| {
            let barrier = barrier.clone();
            G::spawn(move || {
                let mut s = G::connect(addr);
                let msg = message(i, size);
                let mut back = vec![0u8; size];
                for round in 0..warm_up(rounds) + rounds {
                    if round == warm_up(rounds) {
                        G::wait(&barrier);
                    }
                    s.write_all(&msg).unwrap();
                    s.read_exact(&mut back).unwrap();
                    assert!(back == msg, "client {i}: a wrong echo");
                }
                G::shutdown_write(&s);
            })
        })
        .collect();
    G::wait(&barrier);
    let start = Instant::now();
    for h in clients {
        G::join(h);
    }
    let elapsed = start.elapsed();
    assert_eq!(G::join(server), echoed_bytes(c, rounds), "bytes echoed");
    elapsed
}

/// Runs `fibers_*` case `c` for contender `who` (weft or may) with `workers` worker
/// threads in a child process; returns ns per round trip.
fn run_child(c: NetCase, who: usize, workers: usize) -> f64 {
    crate::child::run(
        CHILD_ARG,
        RESULT_PREFIX,
        &c.name(),
        CONTENDERS[who],
        workers,
    )
}

/// The child process: `CHILD_ARG <case> <weft|may> <workers>`. Prints
/// `NET-RESULT <ns per round trip>` and exits 0, or exits 2 on bad arguments (a
/// failed check panics: non-zero exit).
pub fn child_main(args: &[String]) -> ExitCode {
    crate::child::die_with_parent();
    let [case, who, workers] = args else {
        eprintln!("usage: weft-bench {CHILD_ARG} <case> <weft|may> <workers>");
        return ExitCode::from(2);
    };
    let Some(
        c @ NetCase {
            way: Way::Fibers, ..
        },
    ) = NetCase::parse(case)
    else {
        eprintln!("{CHILD_ARG}: unknown fibers case '{case}'");
        return ExitCode::from(2);
    };
    let Ok(workers) = workers.parse::<usize>() else {
        eprintln!("{CHILD_ARG}: bad worker count '{workers}'");
        return ExitCode::from(2);
    };
    let elapsed = match who.as_str() {
        "weft" => weft_fibers(c, workers, c.rounds()),
        "may" => {
            // Before may's first use: it reads its configuration once.
            may::config().set_workers(workers);
            fibers::<MayCoroutines>(c, c.rounds())
        }
        _ => {
            eprintln!("{CHILD_ARG}: unknown contender '{who}'");
            return ExitCode::from(2);
        }
    };
    let ns = ns_per_round_trip(c, elapsed);
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{RESULT_PREFIX} {ns:?}");
    let _ = stdout.flush();
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_parse_and_are_unique() {
        let all = NetCase::all();
        assert_eq!(all.len(), 8);
        let mut names: Vec<String> = all.iter().map(|c| c.name()).collect();
        for (c, name) in all.iter().zip(&names) {
            assert_eq!(NetCase::parse(name), Some(*c));
        }
        assert!(names.contains(&"tasks_16k_100conn".to_string()));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let s = suite(&Options::for_tests());
        assert_eq!(s.cases.len(), 8);
        assert!(s.cases.iter().all(|c| c.metrics.len() == 2));
    }

    /// Every contender runs every case of its way, with 20 round trips a
    /// connection: tasks and fibers in-process (may's scheduler with its default
    /// configuration).
    #[test]
    fn every_contender_runs_every_case() {
        let _may = crate::child::may_in_process();
        for c in NetCase::all() {
            match c.way {
                Way::Tasks => {
                    assert!(weft_tasks(c, 2, 20) > Duration::ZERO);
                    assert!(tokio_tasks(c, 2, 20) > Duration::ZERO);
                }
                Way::Fibers => {
                    assert!(weft_fibers(c, 2, 20) > Duration::ZERO);
                    assert!(fibers::<MayCoroutines>(c, 20) > Duration::ZERO);
                }
            }
        }
    }
}
