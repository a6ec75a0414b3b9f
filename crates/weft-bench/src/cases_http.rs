//! The `http` suite (issue 17): an HTTP/1.1 "Hello, World!" server on one
//! core under `wrk` on the other, four ways:
//!
//! * `weft-hyper` — hyper 1.x on weft tasks: weft's `examples/hello_http`
//!   (`weft::hyper::{WeftIo, WeftTimer}`, one task per connection).
//! * `tokio-hyper` — the same server code on tokio: `weft-bench serve
//!   tokio-hyper ADDR` (hyper-util's `TokioIo` and `TokioTimer`, a 1-worker
//!   multi-thread runtime, the accept loop spawned as a task as in the weft
//!   example).
//! * `weft-fibers` — weft's `examples/hello_http_fibers`: one fiber per
//!   connection, blocking `std::io` reads and writes, `httparse`.
//! * `may_minihttp` — may_minihttp's hello world on may's coroutines:
//!   `weft-bench serve may-minihttp ADDR` (`may::config().set_workers(1)`,
//!   worker pinning off: `taskset` pins it).
//!
//! One measurement starts the server as its own process with one worker
//! (`WEFT_WORKERS=1 WEFT_INTERACTIVE=0` for weft) pinned to the first
//! allowed core (`taskset -c`), waits for its `listening on ADDR` line,
//! warms it up with one second of `wrk`, reads the server's CPU time
//! (`/proc/PID/stat`, utime + stime, all its threads), runs
//! `wrk -t1 -c50 -d5s --latency` pinned to the second allowed core, reads
//! the CPU time again and stops the server (SIGINT, then SIGKILL). Only one
//! server is alive at a time, and the harness rotates the order from round
//! to round. Figures: requests per second, the p50 and p99 latencies of
//! wrk's `--latency` distribution, server CPU time per request (the clock
//! ticks of `/proc/PID/stat`, 10 ms each at the usual 100 Hz, over about 5 s
//! of CPU), socket errors plus non-2xx responses (should be 0), and the
//! busy time of the machine's cores that neither the server nor wrk spent
//! (`/proc/stat` less both processes' CPU time, in % of all cores): other
//! people's jobs and unattributed kernel work, the measurement's noise
//! floor. Before each run the suite waits for the machine to be less than
//! 10 % busy over a second; a run that others disturbed by more than 5 % of
//! the cores' time is repeated (3 runs at most, all within half of
//! `--timeout`; give it `--timeout 600` on a shared machine), and the least
//! disturbed run is the measurement.
//!
//! The weft examples must be built first, with the same profile:
//! `cargo build --release -p weft --features hyper --examples`. `wrk` and
//! `taskset` must be installed (`apt-get install -y wrk`).
//!
//! After the harness's table, [`print_markdown`] prints every round and the
//! medians as a markdown table.

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{lock, median, Case, Metric, Options, Suite, Unit};

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &["weft-hyper", "tokio-hyper", "weft-fibers", "may_minihttp"];
const WEFT_HYPER: usize = 0;
const TOKIO_HYPER: usize = 1;
const WEFT_FIBERS: usize = 2;
const MAY: usize = 3;

/// The first argument of `weft-bench serve SERVER ADDR`.
pub const SERVE_ARG: &str = "serve";

/// wrk's settings.
const CONNECTIONS: usize = 50;
const DURATION_S: u64 = 5;
const WARM_UP_S: u64 = 1;
/// Rounds (fixed: one round takes about 30 s).
const ROUNDS: usize = 3;
/// Runs per measurement at most, and how much of the cores' time other
/// processes may take (in %) before a run is repeated.
const ATTEMPTS: usize = 3;
const MAX_OTHER_CPU: f64 = 5.0;
/// The index of the `other cpu` metric.
const OTHER_CPU: usize = 5;
/// How long a server may take to print its address.
const START_LIMIT: Duration = Duration::from_secs(30);

const BODY: &str = "Hello, World!";

/// What `http --help` prints above the options.
pub const HELP: &str = "\
hello_c50: an HTTP/1.1 \"Hello, World!\" server, each in its own process with 1 worker pinned to
  one core (taskset), loaded by `wrk -t1 -c50 -d5s --latency` pinned to the other core, after 1 s
  of untimed wrk; one server alive at a time, 3 rounds (fixed), order rotating.
  weft-hyper: hyper on weft tasks (weft's examples/hello_http, WEFT_WORKERS=1 WEFT_INTERACTIVE=0);
  tokio-hyper: the same code on a 1-worker tokio runtime (`weft-bench serve tokio-hyper ADDR`,
  hyper-util TokioIo + TokioTimer); weft-fibers: examples/hello_http_fibers (one fiber per
  connection, blocking std::io, httparse); may_minihttp: its hello world on 1 may worker
  (`weft-bench serve may-minihttp ADDR`).
  Rows: requests per second; p50 and p99 latency (wrk); server CPU time (utime + stime from
  /proc/PID/stat) per request; socket errors + non-2xx responses (should be 0); other cpu: busy
  time of the cores (/proc/stat) spent by neither the server nor wrk, in % of all cores (noise).
  Each run first waits for the machine to be < 10 % busy; a run with other cpu > 5 % is repeated
  (at most 3 runs, within half of --timeout: use --timeout 600), the least disturbed one counts.
  Build the weft examples first: cargo build --release -p weft --features hyper --examples.
  Needs wrk and taskset. Every round and the medians are printed again as a markdown table.";

/// One finished measurement, for the markdown table.
struct Record {
    who: usize,
    values: Vec<f64>,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

pub fn suite(_opts: &Options) -> Suite {
    let metrics = vec![
        Metric::new("req/s", "second", Unit::Rate),
        Metric::new("p50", "request", Unit::Ns),
        Metric::new("p99", "request", Unit::Ns),
        Metric::new("cpu", "request", Unit::Ns),
        Metric::new("errors", "run", Unit::Count),
        Metric::new("other cpu", "run", Unit::Percent),
    ];
    Suite {
        command: "http",
        contenders: CONTENDERS,
        cases: vec![
            Case::new("hello_c50", metrics, |who, opts| measure(who, opts.timeout)).rounds(ROUNDS),
        ],
        notes: vec![
            format!(
                "each server: own process, 1 worker, taskset core {}; wrk -t1 -c{CONNECTIONS} \
                 -d{DURATION_S}s --latency on core {}",
                cpus().0,
                cpus().1
            ),
            "cpu: server utime + stime (/proc/PID/stat, 10 ms ticks) over the wrk run / requests"
                .into(),
            "other cpu: busy time of all cores (/proc/stat) not spent by the server or wrk, \
             in % of all cores over the run (other processes, softirqs); each run first waits \
             for the machine to be < 10 % busy, runs with other cpu > 5 % are repeated (3 at most)"
                .into(),
        ],
        baseline: None,
        checks: Vec::new(),
    }
}

/// The first two cores this process may run on: (server's, wrk's).
fn cpus() -> (usize, usize) {
    // SAFETY: `set` is a plain bit set, zeroed; `sched_getaffinity` writes at most
    // `size_of::<cpu_set_t>()` bytes into it.
    let allowed: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0, 1);
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    };
    match allowed[..] {
        [a, b, ..] => (a, b),
        _ => panic!("the http suite needs two cores (allowed: {allowed:?})"),
    }
}

/// A weft example next to this binary (`target/<profile>/examples/NAME`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("cannot find this executable");
    let path = exe.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the weft examples with the same profile first \
         (cargo build --release -p weft --features hyper --examples)",
        path.display()
    );
    path
}

/// A server process; interrupted, then killed, when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(who: usize, cpu: usize) -> Server {
        let exe = std::env::current_exe().expect("cannot find this executable");
        let mut cmd = Command::new("taskset");
        cmd.arg("-c").arg(cpu.to_string());
        match who {
            WEFT_HYPER => cmd.arg(example("hello_http")),
            WEFT_FIBERS => cmd.arg(example("hello_http_fibers")),
            TOKIO_HYPER => cmd.arg(exe).args([SERVE_ARG, "tokio-hyper"]),
            MAY => cmd.arg(exe).args([SERVE_ARG, "may-minihttp"]),
            _ => unreachable!("no contender {who}"),
        };
        let mut child = cmd
            .arg("127.0.0.1:0")
            .env("WEFT_WORKERS", "1")
            .env("WEFT_INTERACTIVE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start taskset for {}: {e}", CONTENDERS[who]));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_LIMIT).unwrap_or_default();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok());
        // Made first so that a panic below stops the child.
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        server.addr = addr.unwrap_or_else(|| {
            panic!(
                "{} did not print `listening on ADDR` (got {line:?})",
                CONTENDERS[who]
            )
        });
        server
    }

    /// The server's user + system CPU time so far (all its threads).
    fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("cannot read the server's /proc/PID/stat");
        // After the command name (in parentheses, which may hold spaces): field 3
        // onwards; utime and stime are fields 14 and 15.
        let rest = &stat[stat.rfind(')').expect("malformed stat") + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        ticks(fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: `kill` has no memory-safety preconditions; the pid is our child's,
        // not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(2);
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

/// What one wrk run reported.
#[derive(Debug, Clone, PartialEq)]
struct WrkReport {
    requests: u64,
    per_second: f64,
    p50_ns: f64,
    p99_ns: f64,
    errors: u64,
}

fn run_wrk(addr: SocketAddr, cpu: usize, seconds: u64) -> String {
    let out = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg("wrk")
        .args(["-t1", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
        .arg("--latency")
        .arg(format!("http://{addr}/"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run wrk (apt-get install -y wrk): {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "wrk failed ({}): {text}", out.status);
    text
}

/// A wrk duration (`123.45us`, `1.20ms`, `2.00s`, `1.00m`) in nanoseconds.
fn wrk_duration(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (x, unit) = s.split_at(split);
    let x: f64 = x.parse().ok()?;
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    Some(x * scale)
}

/// Parses the output of `wrk --latency`.
fn parse_wrk(text: &str) -> Option<WrkReport> {
    let mut r = WrkReport {
        requests: 0,
        per_second: f64::NAN,
        p50_ns: f64::NAN,
        p99_ns: f64::NAN,
        errors: 0,
    };
    let mut seen_requests = false;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["50%", d] => r.p50_ns = wrk_duration(d)?,
            ["99%", d] => r.p99_ns = wrk_duration(d)?,
            [n, "requests", "in", ..] => {
                r.requests = n.parse().ok()?;
                seen_requests = true;
            }
            ["Requests/sec:", x] => r.per_second = x.parse().ok()?,
            ["Socket", "errors:", ..] => {
                // connect N, read N, write N, timeout N
                for w in words.iter().skip(2) {
                    if let Ok(n) = w.trim_end_matches(',').parse::<u64>() {
                        r.errors += n;
                    }
                }
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => r.errors += n.parse::<u64>().ok()?,
            _ => {}
        }
    }
    let complete = seen_requests && !r.per_second.is_nan() && !r.p50_ns.is_nan();
    complete.then_some(r)
}

/// One measurement of contender `who`: up to [`ATTEMPTS`] runs, until one that
/// other processes disturbed by at most [`MAX_OTHER_CPU`] (while about half of
/// `limit`, the harness's limit on one measurement, is left); the least disturbed
/// run counts.
fn measure(who: usize, limit: Duration) -> Vec<f64> {
    let deadline = Instant::now() + limit / 2;
    let mut best: Option<Vec<f64>> = None;
    for attempt in 1..=ATTEMPTS {
        let values = measure_once(who, deadline);
        let other = values[OTHER_CPU];
        if best.as_ref().is_none_or(|b| other < b[OTHER_CPU]) {
            best = Some(values);
        }
        if other <= MAX_OTHER_CPU || attempt == ATTEMPTS || Instant::now() >= deadline {
            break;
        }
        eprintln!(
            "  {} disturbed ({other:.0} % other CPU): again",
            CONTENDERS[who]
        );
    }
    let values = best.expect("at least one attempt");
    lock(&RECORDS).push(Record {
        who,
        values: values.clone(),
    });
    values
}

/// One run: the server started, warmed up, loaded, stopped.
fn measure_once(who: usize, quiet_by: Instant) -> Vec<f64> {
    let (server_cpu, wrk_cpu) = cpus();
    wait_for_quiet(quiet_by);
    let server = Server::start(who, server_cpu);
    check_response(server.addr, CONTENDERS[who]);
    run_wrk(server.addr, wrk_cpu, WARM_UP_S);
    let cpu_before = server.cpu_time();
    let children_before = children_cpu();
    let busy_before = machine_busy();
    let started = Instant::now();
    let text = run_wrk(server.addr, wrk_cpu, DURATION_S);
    let wall = started.elapsed();
    let busy = machine_busy().saturating_sub(busy_before);
    let wrk = children_cpu().saturating_sub(children_before);
    let cpu = server.cpu_time().saturating_sub(cpu_before);
    drop(server);
    let r = parse_wrk(&text).unwrap_or_else(|| panic!("cannot read wrk's report: {text}"));
    assert!(r.requests > 0, "no requests completed: {text}");
    let other = busy.saturating_sub(cpu + wrk).as_secs_f64()
        / (wall.as_secs_f64() * crate::harness::cores() as f64);
    let values = vec![
        r.per_second,
        r.p50_ns,
        r.p99_ns,
        cpu.as_nanos() as f64 / r.requests as f64,
        r.errors as f64,
        100.0 * other,
    ];
    values
}

/// Clock ticks per second of `/proc` (`USER_HZ`).
fn ticks_per_second() -> u64 {
    // SAFETY: `sysconf` has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

fn ticks(n: u64) -> Duration {
    Duration::from_nanos(n * 1_000_000_000 / ticks_per_second())
}

/// Busy time of all cores so far: the first line of `/proc/stat` less idle and
/// iowait (guest time is already in user time).
fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("cannot read /proc/stat");
    let line = stat.lines().next().unwrap_or_default();
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    ticks(
        f.iter().take(8).sum::<u64>()
            - f.get(3).copied().unwrap_or(0)
            - f.get(4).copied().unwrap_or(0),
    )
}

/// User + system time of this process's waited-for children so far.
fn children_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is valid for writes of one `rusage`, all that `getrusage`
    // writes.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage: {}", io::Error::last_os_error());
    // SAFETY: it returned 0, so it filled `usage` in (and it was zeroed).
    let u = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Waits (at most until `give_up`) until the machine is less than 10 % busy over a
/// second, so that other people's jobs do not share the measured cores.
fn wait_for_quiet(give_up: Instant) {
    loop {
        let before = machine_busy();
        std::thread::sleep(Duration::from_secs(1));
        let share =
            machine_busy().saturating_sub(before).as_secs_f64() / crate::harness::cores() as f64;
        if share < 0.10 {
            return;
        }
        if Instant::now() > give_up {
            eprintln!(
                "  the machine is still {:.0} % busy; measuring anyway",
                100.0 * share
            );
            return;
        }
        eprintln!(
            "  waiting for a quiet machine ({:.0} % busy)",
            100.0 * share
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// One request by hand before the load: the server answers `Hello, World!`.
fn check_response(addr: SocketAddr, name: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("cannot connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with(BODY),
        "{name} answered {text:?}"
    );
}

/// Every round and the medians, as a markdown table.
pub fn print_markdown() {
    let records = lock(&RECORDS);
    if records.is_empty() {
        return;
    }
    println!("\n| server | round | req/s | p50 | p99 | CPU µs/request | errors | other CPU |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let row = |name: &str, round: &str, v: &[f64]| {
        println!(
            "| {name} | {round} | {:.0} | {:.0} µs | {:.0} µs | {:.2} | {:.0} | {:.1} % |",
            v[0],
            v[1] / 1e3,
            v[2] / 1e3,
            v[3] / 1e3,
            v[4],
            v[5]
        );
    };
    for (who, name) in CONTENDERS.iter().enumerate() {
        let mine: Vec<&Record> = records.iter().filter(|r| r.who == who).collect();
        for (i, r) in mine.iter().enumerate() {
            row(name, &(i + 1).to_string(), &r.values);
        }
        if !mine.is_empty() {
            let medians: Vec<f64> = (0..mine[0].values.len())
                .map(|m| {
                    let xs: Vec<f64> = mine.iter().map(|r| r.values[m]).collect();
                    median(&xs).unwrap_or(f64::NAN)
                })
                .collect();
            row(&format!("**{name}**"), "**median**", &medians);
        }
    }
}

// ------------------------------------------------------------- servers ----

/// `weft-bench serve <tokio-hyper|may-minihttp> ADDR`: runs that server (one
/// worker) until killed; prints `listening on ADDR` first.
pub fn serve_main(args: &[String]) -> ExitCode {
    let (Some(which), Some(addr)) = (args.first(), args.get(1)) else {
        eprintln!("usage: weft-bench {SERVE_ARG} <tokio-hyper|may-minihttp> ADDR");
        return ExitCode::from(2);
    };
    let result = match which.as_str() {
        "tokio-hyper" => tokio_hyper::serve(addr),
        "may-minihttp" => may_minihttp_server::serve(addr),
        other => {
            eprintln!("{SERVE_ARG}: unknown server '{other}'");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{SERVE_ARG} {which}: {e}");
            ExitCode::from(1)
        }
    }
}

/// Whether an accept error is worth retrying.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// weft's `examples/hello_http` on tokio.
mod tokio_hyper {
    use std::convert::Infallible;
    use std::io;
    use std::time::Duration;

    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tokio::net::{TcpListener, TcpStream};

    async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        Ok(Response::new(Full::new(Bytes::from_static(
            super::BODY.as_bytes(),
        ))))
    }

    async fn serve_one(stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let conn = http1::Builder::new()
            .keep_alive(true)
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service_fn(hello));
        if let Err(e) = conn.await {
            if !e.is_incomplete_message() {
                eprintln!("connection error: {e}");
            }
        }
    }

    async fn accept_loop(listener: TcpListener) -> io::Result<()> {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => drop(tokio::spawn(serve_one(stream))),
                Err(e) if super::transient(&e) => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn serve(addr: &str) -> io::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        rt.block_on(async {
            let listener = TcpListener::bind(addr).await?;
            println!("listening on {}", listener.local_addr()?);
            // On the worker, as the weft example's accept loop.
            tokio::spawn(accept_loop(listener))
                .await
                .map_err(io::Error::other)?
        })
    }
}

/// may_minihttp's hello world.
mod may_minihttp_server {
    use std::io;

    use may_minihttp::{HttpServer, HttpService, Request, Response};

    #[derive(Clone)]
    struct Hello;

    impl HttpService for Hello {
        fn call(&mut self, _req: Request, rsp: &mut Response) -> io::Result<()> {
            rsp.body(super::BODY);
            Ok(())
        }
    }

    pub fn serve(addr: &str) -> io::Result<()> {
        may::config().set_workers(1).set_worker_pin(false);
        // may_minihttp does not say which port it bound: take a free one first.
        let addr = std::net::TcpListener::bind(addr)?.local_addr()?;
        let server = HttpServer(Hello).start(addr)?;
        println!("listening on {addr}");
        server
            .join()
            .map_err(|_| io::Error::other("the may_minihttp server panicked"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Running 5s test @ http://127.0.0.1:3000/
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   405.12us  100.07us   3.52ms   90.12%
    Req/Sec   121.13k     4.01k  126.12k    80.00%
  Latency Distribution
     50%  390.00us
     75%  420.00us
     90%  480.00us
     99%    1.10ms
  602762 requests in 5.00s, 50.02MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 3
Requests/sec: 120552.40
Transfer/sec:     10.00MB
";

    #[test]
    fn parses_wrk() {
        let r = parse_wrk(SAMPLE).unwrap();
        assert_eq!(r.requests, 602_762);
        assert_eq!(r.per_second, 120_552.40);
        assert_eq!(r.p50_ns, 390_000.0);
        assert_eq!(r.p99_ns, 1_100_000.0);
        assert_eq!(r.errors, 6);
        assert!(parse_wrk("garbage").is_none());
        assert_eq!(wrk_duration("2.00s"), Some(2e9));
    }

    #[test]
    fn suite_definition() {
        let s = suite(&Options::for_tests());
        assert_eq!(s.contenders[0], "weft-hyper");
        assert_eq!(s.cases.len(), 1);
        assert_eq!(s.cases[0].rounds, Some(ROUNDS));
        assert_eq!(s.cases[0].metrics.len(), 6);
    }
}
