//! Review (session 38, misc): bad input from safe code and from the environment.
//!
//! 1. weft's environment variables with unusual, malformed, out-of-range and non-UTF-8
//!    values (each case in a child process: the environment is process-wide, and
//!    tests run in parallel, so this process never sets any variable);
//! 2. diagnostics (`Runtime::dump`, `Runtime::stats`, the deadlock watcher, the stall
//!    report) read from inside tasks, fibers, fork-join jobs and blocking closures,
//!    while the runtime is busy, while it shuts down and after;
//! 3. `weft::io`'s `AsyncReadExt`/`AsyncWriteExt` helpers over readers and writers that
//!    misbehave (claim more bytes than the buffer holds, take no bytes, fail with
//!    `Interrupted`/`WouldBlock`, panic, return bad UTF-8, stay pending, are dropped
//!    mid-operation);
//! 4. `#[weft::main]`/`#[weft::test]` with unusual (but compiling) arguments.

mod common;

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::child::Output;
use common::{wait_until, watchdog};
use weft::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weft::{fiber, Builder, Handle};

const CHILD: &str = "WEFT_REVIEW_S38_MISC_CHILD";
/// Not a weft variable: asks the `report` child to say whether a sysmon thread runs.
const CHECK_SYSMON: &str = "S38_MISC_CHECK_SYSMON";

// ---------------------------------------------------------------------------------
// Child processes

/// Not a real test unless run as a child: runs the case named by [`CHILD`].
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "report" => child_report(),
        "deadlock" => child_deadlock(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

/// The `key` a child reported, as a number.
fn number(out: &Output, key: &str) -> usize {
    out.report(key)
        .unwrap_or_else(|| panic!("no {key} report\n{}", out.context()))
        .parse()
        .unwrap()
}

/// Runs case `case` in a child process with `vars` (raw bytes: a value may be
/// non-UTF-8) set and weft's other variables removed; kills it after 10 s.
fn run_child(case: &str, vars: &[(&str, &[u8])]) -> Output {
    let mut all: Vec<(&str, &[u8])> = vec![(CHILD, case.as_bytes())];
    all.extend_from_slice(vars);
    common::child::run_with_bytes("child_process_entry", &all, Duration::from_secs(10))
}

fn page_size() -> usize {
    // SAFETY: a plain system call.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap()
}

/// Whether a thread of this process is named `name` (as `/proc` shows it).
fn thread_named(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
}

/// Whether a thread named `name` shows up within 300 ms.
fn thread_appears(name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_millis(300);
    loop {
        if thread_named(name) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Builds a default runtime (threads named `s38m-N`) from the environment and
/// reports its pool sizes, the default fiber stack size and, if asked, whether the
/// monitor thread (`s38m-sysmon`) runs. The runtime is dropped at the end (printing
/// its statistics under `WEFT_STATS`).
fn child_report() {
    let rt = Builder::new().thread_name("s38m").build().unwrap();
    let stats = rt.stats();
    println!("CHILD workers={}", stats.num_workers);
    let interactive = stats
        .pools
        .iter()
        .find(|p| p.pool == weft::Pool::Interactive)
        .map_or(0, |p| p.num_workers);
    println!("CHILD interactive={interactive}");
    println!(
        "CHILD available={}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    // The default stack size: what a parked fiber adds to the reserved address space,
    // less its guard page.
    let before = fiber::stats().stack_bytes_reserved;
    let (parked_tx, parked_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = futures_channel::oneshot::channel::<()>();
    let h = rt
        .block_on(async move {
            Some(fiber::spawn(move || {
                parked_tx.send(()).unwrap();
                let _ = weft::wait(go_rx);
            }))
        })
        .unwrap();
    parked_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let after = fiber::stats().stack_bytes_reserved;
    println!("CHILD stack={}", after - before - page_size() as u64);
    go_tx.send(()).unwrap();
    h.join().unwrap();
    // The deadlock watcher's thread starts with the runtime (and names itself); no
    // need to look for it without the variable.
    let watcher =
        std::env::var_os("WEFT_DEBUG_DEADLOCK").is_some() && thread_appears("s38m-deadlock");
    println!("CHILD deadlock_watcher={}", u8::from(watcher));
    if std::env::var_os(CHECK_SYSMON).is_some() {
        // The monitor starts when a worker first runs (done above).
        println!("CHILD sysmon={}", u8::from(thread_appears("s38m-sysmon")));
    }
    drop(rt);
}

const MIB2: usize = 2 * 1024 * 1024;

// ---------------------------------------------------------------------------------
// 1. Environment variables

/// Spellings the parsers document or tolerate: spaces around a count, a `+` sign, a
/// lower-case unit with a space before it, upper/mixed-case flags.
#[test]
fn env_unusual_but_valid_spellings_are_accepted() {
    let out = run_child(
        "report",
        &[
            ("WEFT_WORKERS", b" 3 "),
            ("WEFT_INTERACTIVE", b"+2"),
            ("WEFT_STACK_SIZE", b" 128 kib "),
            ("WEFT_STATS", b" Yes "),
            ("WEFT_VERBOSE", b"ON"),
            ("WEFT_DEBUG_DEADLOCK", b" on "),
            ("WEFT_DEBUG_SYSMON", b"TRUE"),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    assert_eq!(number(&out, "workers"), 3, "{ctx}");
    assert_eq!(number(&out, "interactive"), 2, "{ctx}");
    assert_eq!(number(&out, "stack"), 128 * 1024, "{ctx}");
    assert_eq!(number(&out, "deadlock_watcher"), 1, "{ctx}");
    assert!(out.stderr.contains("weft: starting runtime"), "{ctx}");
    assert!(out.stderr.contains("weft blocking pool"), "{ctx}");
    assert!(!out.stderr.contains("ignoring"), "{ctx}");
}

/// Malformed values (empty, a list, a fraction, a word, a sign): each reported by
/// name and ignored; a malformed flag reads as off (no statistics, no configuration).
#[test]
fn env_malformed_values_are_reported_and_ignored() {
    let out = run_child(
        "report",
        &[
            ("WEFT_WORKERS", b""),
            ("WEFT_INTERACTIVE", b"1 2"),
            ("WEFT_STACK_SIZE", b"1.5M"),
            ("WEFT_STATS", b"maybe"),
            ("WEFT_VERBOSE", b"2"),
            ("WEFT_MAX_EXTRA_WORKERS", b"-1"),
            ("WEFT_DEBUG_DEADLOCK", b"maybe"),
            ("WEFT_DEBUG_SYSMON", b"y"),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    assert_eq!(number(&out, "workers"), number(&out, "available"), "{ctx}");
    assert_eq!(number(&out, "interactive"), 1, "{ctx}");
    assert_eq!(number(&out, "stack"), MIB2, "{ctx}");
    for var in [
        "WEFT_WORKERS",
        "WEFT_INTERACTIVE",
        "WEFT_STACK_SIZE",
        "WEFT_STATS",
        "WEFT_VERBOSE",
        "WEFT_MAX_EXTRA_WORKERS",
        "WEFT_DEBUG_DEADLOCK",
        "WEFT_DEBUG_SYSMON",
    ] {
        assert!(
            out.stderr.contains(&format!("ignoring {var}=")),
            "{var} not reported\n{ctx}"
        );
    }
    assert_eq!(number(&out, "deadlock_watcher"), 0, "{ctx}");
    assert!(!out.stderr.contains("weft: starting runtime"), "{ctx}");
    assert!(!out.stderr.contains("weft blocking pool"), "{ctx}");
}

/// Out of range (past the limits, past `usize`, zero where zero is not allowed):
/// reported and ignored, never wrapped or truncated into something accepted.
#[test]
fn env_out_of_range_values_are_reported_and_ignored() {
    let out = run_child(
        "report",
        &[
            ("WEFT_WORKERS", b"4097"),
            ("WEFT_INTERACTIVE", b"18446744073709551616"),
            ("WEFT_STACK_SIZE", b"18446744073709551615K"),
            ("WEFT_MAX_EXTRA_WORKERS", b"99999999999999999999999"),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    assert_eq!(number(&out, "workers"), number(&out, "available"), "{ctx}");
    assert_eq!(number(&out, "interactive"), 1, "{ctx}");
    assert_eq!(number(&out, "stack"), MIB2, "{ctx}");
    for var in [
        "WEFT_WORKERS",
        "WEFT_INTERACTIVE",
        "WEFT_STACK_SIZE",
        "WEFT_MAX_EXTRA_WORKERS",
    ] {
        assert!(
            out.stderr.contains(&format!("ignoring {var}=")),
            "{var}\n{ctx}"
        );
    }

    let out = run_child(
        "report",
        &[
            ("WEFT_WORKERS", b"0"),
            ("WEFT_STACK_SIZE", b"0K"),
            // Zero is allowed here (no interactive pool), spaces too.
            ("WEFT_INTERACTIVE", b" 0 "),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    assert_eq!(number(&out, "workers"), number(&out, "available"), "{ctx}");
    assert_eq!(number(&out, "interactive"), 0, "{ctx}");
    assert_eq!(number(&out, "stack"), MIB2, "{ctx}");
    assert!(out.stderr.contains("ignoring WEFT_WORKERS="), "{ctx}");
    assert!(out.stderr.contains("ignoring WEFT_STACK_SIZE="), "{ctx}");
    assert!(!out.stderr.contains("WEFT_INTERACTIVE"), "{ctx}");
}

/// The largest stack size accepted, spelled with a unit (1G is exactly the limit).
#[test]
fn env_stack_size_at_the_limit_is_accepted() {
    let out = run_child("report", &[("WEFT_STACK_SIZE", b"1g")]);
    out.assert_finished();
    assert_eq!(number(&out, "stack"), 1 << 30, "{}", out.context());
    assert!(!out.stderr.contains("ignoring"), "{}", out.context());
}

/// Was a bug, fixed in session 38; before the fix: `WEFT_INTERACTIVE` and
/// `WEFT_MAX_EXTRA_WORKERS` allow zero, but only spelled exactly `0` (after trimming): `00`
/// or `+0`, which parse as zero, are refused with "it must be at least 1" and the default
/// is used (an interactive worker).
#[test]
fn env_zero_spelled_00_or_plus_0_is_zero_where_zero_is_allowed() {
    let out = run_child(
        "report",
        &[
            ("WEFT_INTERACTIVE", b"00"),
            ("WEFT_MAX_EXTRA_WORKERS", b"+0"),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    assert!(!out.stderr.contains("ignoring"), "{ctx}");
    assert_eq!(number(&out, "interactive"), 0, "{ctx}");
}

/// Was a bug, fixed in session 38; before the fix: a value that is not UTF-8 is malformed,
/// but it is ignored silently (read as unset), where the README promises "a malformed value
/// is reported on stderr".
#[test]
fn env_non_utf8_values_are_reported() {
    let out = run_child(
        "report",
        &[
            ("WEFT_WORKERS", b"3\xff"),
            ("WEFT_INTERACTIVE", b"\xfe"),
            ("WEFT_STACK_SIZE", b"64K\xff"),
            ("WEFT_STATS", b"1\xff"),
            ("WEFT_DEBUG_DEADLOCK", b"1\xff"),
        ],
    );
    out.assert_finished();
    let ctx = out.context();
    // Ignored, as documented...
    assert_eq!(number(&out, "workers"), number(&out, "available"), "{ctx}");
    assert_eq!(number(&out, "interactive"), 1, "{ctx}");
    assert_eq!(number(&out, "stack"), MIB2, "{ctx}");
    assert_eq!(number(&out, "deadlock_watcher"), 0, "{ctx}");
    // ...but also reported.
    for var in [
        "WEFT_WORKERS",
        "WEFT_INTERACTIVE",
        "WEFT_STACK_SIZE",
        "WEFT_STATS",
        "WEFT_DEBUG_DEADLOCK",
    ] {
        assert!(out.stderr.contains(var), "{var} not reported\n{ctx}");
    }
}

/// `WEFT_DEBUG_STALL`: unset or empty leaves the stall report on; `0` or a malformed
/// value turns it off ("a malformed flag reads as off"). Seen through the monitor
/// thread, which with temporary workers off runs only for the stall report.
/// Was a bug, fixed in session 38; before the fix: a non-UTF-8 value leaves it on (read as
/// unset), silently.
#[test]
fn env_weft_debug_stall_malformed_reads_as_off_also_when_not_utf8() {
    let cases: [(&[u8], u8); 4] = [(b"", 1), (b"0", 0), (b"garbage", 0), (b"\xff", 0)];
    for (value, sysmon) in cases {
        let out = run_child(
            "report",
            &[
                ("WEFT_DEBUG_STALL", value),
                ("WEFT_MAX_EXTRA_WORKERS", b"0"),
                (CHECK_SYSMON, b"1"),
            ],
        );
        out.assert_finished();
        assert_eq!(
            number(&out, "sysmon"),
            usize::from(sysmon),
            "WEFT_DEBUG_STALL={:?}\n{}",
            OsStr::from_bytes(value),
            out.context()
        );
    }
}

/// Two fibers of the interactive pool each wait for the other, under
/// `WEFT_DEBUG_DEADLOCK` spelled with spaces and capitals; the child reads dumps and
/// statistics meanwhile (from a fiber and from this thread).
fn child_deadlock() {
    let rt = Builder::new()
        .worker_threads(1)
        .interactive_threads(1)
        .build()
        .unwrap();
    let (to_a, a_rx) = weft::chan::bounded::<u32>(0);
    let (to_b, b_rx) = weft::chan::bounded::<u32>(0);
    let handle = rt.handle().clone();
    let _a = rt.block_on(async move {
        Some(fiber::Builder::new().name("a").spawn(move || {
            let v = a_rx.recv_blocking();
            let _ = to_b.send_blocking(1);
            v
        }))
    });
    let _b = rt.spawn_on(weft::Pool::Interactive, async move {
        Some(fiber::Builder::new().name("b").spawn(move || {
            let _ = handle.dump().to_string();
            let _ = handle.stats().to_string();
            let v = b_rx.recv_blocking();
            let _ = to_a.send_blocking(1);
            v
        }))
    });
    wait_until("both fibers are parked", || {
        rt.dump().to_string().matches("parked on chan").count() == 2
    });
    let deadline = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < deadline {
        let _ = rt.dump().to_string();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn env_deadlock_watcher_flag_spelled_loosely_reports_once() {
    let out = run_child("deadlock", &[("WEFT_DEBUG_DEADLOCK", b" True ")]);
    out.assert_finished();
    let ctx = out.context();
    assert_eq!(out.stderr.matches("weft: deadlock").count(), 1, "{ctx}");
    assert!(out.stderr.contains("'a': parked on chan"), "{ctx}");
    assert!(out.stderr.contains("'b': parked on chan"), "{ctx}");
}

// ---------------------------------------------------------------------------------
// 2. Diagnostics

/// The shape `Dump`'s `Display` promises: a header line, then one line per entry.
fn check_dump_shape(d: &weft::Dump) {
    let text = d.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        d.len() + 1,
        "one line per task or fiber:\n{text}"
    );
    assert_eq!(
        lines[0],
        format!("weft dump: {} live tasks and fibers", d.len())
    );
    for l in &lines[1..] {
        assert!(
            (l.starts_with("  task ") || l.starts_with("  fiber "))
                && (l.ends_with(" ms") || l.ends_with(" s")),
            "odd dump line {l:?} in\n{text}"
        );
    }
}

/// `dump` and `stats` read from inside a task, a fiber, both halves of a fork-join
/// `join` and a blocking closure: each returns, and the reading task or fiber lists
/// itself as running.
#[test]
fn dump_and_stats_from_inside_tasks_fibers_joins_and_blocking_closures() {
    watchdog(20, || {
        let rt = Builder::new()
            .worker_threads(2)
            .stall_report(None)
            .build()
            .unwrap();
        let h = rt.handle().clone();
        // A task.
        let task = rt.spawn(async {
            let d = Handle::current().dump();
            check_dump_shape(&d);
            let s = Handle::current().stats();
            assert!(s.active_tasks >= 1);
            let _ = s.to_string();
            d.to_string()
        });
        let id = task.id();
        let text = task.join().unwrap();
        assert!(text.contains(&format!("task {id}: running")), "{text}");
        // A fiber.
        let f = rt
            .block_on(async {
                Some(fiber::Builder::new().name("reader").spawn(|| {
                    let d = Handle::current().dump();
                    check_dump_shape(&d);
                    let _ = Handle::current().stats().to_string();
                    d.to_string()
                }))
            })
            .unwrap();
        let text = f.join().unwrap();
        assert!(text.contains("'reader': running"), "{text}");
        // Fork-join halves, on a worker (from a task) and from a plain thread.
        let (a, b) = rt
            .spawn(async {
                weft::join(
                    || Handle::current().dump().len(),
                    || Handle::current().stats().num_workers,
                )
            })
            .join()
            .unwrap();
        assert!(a >= 1);
        assert_eq!(b, 2);
        let h2 = h.clone();
        let h3 = h.clone();
        let _g = rt.enter();
        let (a, b) = weft::join(move || h2.dump().len(), move || h3.stats().num_workers);
        assert_eq!((a, b), (0, 2));
        // A blocking closure.
        let n = rt
            .spawn_blocking(|| {
                let d = Handle::current().dump();
                check_dump_shape(&d);
                Handle::current().stats().blocking.threads
            })
            .join()
            .unwrap();
        assert!(n >= 1);
    })
}

/// Calls `dump` and `stats` through a handle when dropped, and records what it saw.
struct ReadsOnDrop {
    handle: Handle,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Drop for ReadsOnDrop {
    fn drop(&mut self) {
        let d = self.handle.dump();
        check_dump_shape(&d);
        let s = self.handle.stats();
        let _ = s.to_string();
        self.seen.lock().unwrap().push(d.to_string());
    }
}

/// `dump` and `stats` called from destructors: of a task's future as it completes, of
/// its output, of an aborted task's future; and during shutdown, of a cancelled task's
/// future, of an unwound fiber's locals, from the `on_thread_stop` hook; and through a
/// handle that outlives its runtime.
#[test]
fn dump_and_stats_during_and_after_shutdown() {
    watchdog(20, || {
        let stop_handle: Arc<Mutex<Option<Handle>>> = Arc::new(Mutex::new(None));
        let stops = Arc::new(Mutex::new(Vec::new()));
        let rt = {
            let (stop_handle, stops) = (stop_handle.clone(), stops.clone());
            Builder::new()
                .worker_threads(2)
                .interactive_threads(1)
                .max_extra_workers(0)
                .stall_report(None)
                .on_thread_stop(move || {
                    let h = stop_handle.lock().unwrap().clone();
                    if let Some(h) = h {
                        let d = h.dump();
                        check_dump_shape(&d);
                        let _ = h.stats().to_string();
                        stops.lock().unwrap().push(d.len());
                    }
                })
                .build()
                .unwrap()
        };
        let handle = rt.handle().clone();
        *stop_handle.lock().unwrap() = Some(handle.clone());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reads = |seen: &Arc<Mutex<Vec<String>>>| ReadsOnDrop {
            handle: handle.clone(),
            seen: seen.clone(),
        };
        // Completing, with the reader in the future and in the output.
        let (g1, g2) = (reads(&seen), reads(&seen));
        let out = rt
            .spawn(async move {
                let _in_future = g1;
                weft::task::yield_now().await;
                g2
            })
            .join()
            .unwrap();
        assert_eq!(seen.lock().unwrap().len(), 1);
        drop(out);
        assert_eq!(seen.lock().unwrap().len(), 2);
        // Aborted while parked.
        let g = reads(&seen);
        let aborted = rt.spawn(async move {
            let _g = g;
            std::future::pending::<()>().await;
        });
        wait_until("the task parks", || {
            handle.dump().to_string().contains("parked")
        });
        aborted.abort();
        assert!(aborted.join().unwrap_err().is_cancelled());
        assert_eq!(seen.lock().unwrap().len(), 3);
        seen.lock().unwrap().clear();
        for _ in 0..3 {
            let guard = ReadsOnDrop {
                handle: handle.clone(),
                seen: seen.clone(),
            };
            rt.spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
        }
        let (parked_tx, parked_rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let guard = ReadsOnDrop {
                handle: handle.clone(),
                seen: seen.clone(),
            };
            let parked_tx = parked_tx.clone();
            let (_keep, rx) = futures_channel::oneshot::channel::<()>();
            std::mem::forget(_keep);
            rt.block_on(async move {
                Some(fiber::spawn(move || {
                    let _guard = guard;
                    parked_tx.send(()).unwrap();
                    let _ = weft::wait(rx);
                }))
            });
        }
        for _ in 0..2 {
            parked_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        wait_until("five live", || rt.stats().active_tasks == 5);
        // Another thread reads all along the shutdown.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (h, stop) = (handle.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(SeqCst) || n == 0 {
                    check_dump_shape(&h.dump());
                    let _ = h.stats().to_string();
                    n += 1;
                }
                n
            })
        };
        drop(rt);
        stop.store(true, SeqCst);
        assert!(reader.join().unwrap() > 0);
        assert_eq!(seen.lock().unwrap().len(), 5, "every destructor ran");
        assert_eq!(stops.lock().unwrap().len(), 3, "every worker ran the hook");
        stop_handle.lock().unwrap().take();
        let d = handle.dump();
        assert!(d.is_empty(), "{d}");
        let s = handle.stats();
        assert_eq!(s.active_tasks, 0);
        let _ = s.to_string();
    })
}

/// While tasks and fibers start and finish on every worker, dumps and statistics
/// read from another thread keep their documented shape.
#[test]
fn dump_and_stats_while_busy_keep_their_shape() {
    watchdog(20, || {
        let rt = Builder::new()
            .worker_threads(2)
            .stall_report(None)
            .build()
            .unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawner = {
            let h = rt.handle().clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _g = h.enter();
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    let hs: Vec<_> = (0..32)
                        .map(|i| {
                            h.spawn(async move {
                                if i % 4 == 0 {
                                    weft::time::sleep(Duration::from_micros(200)).await;
                                }
                                i
                            })
                        })
                        .collect();
                    let f = fiber::Builder::new()
                        .name("churn")
                        .spawn(|| fiber::sleep(Duration::from_micros(100)));
                    for h in hs {
                        h.join().unwrap();
                    }
                    f.join().unwrap();
                    n += 1;
                }
                n
            })
        };
        let deadline = Instant::now() + Duration::from_millis(400);
        let mut reads = 0;
        while Instant::now() < deadline {
            check_dump_shape(&rt.dump());
            let s = rt.stats();
            assert_eq!(s.workers.len(), s.num_workers);
            assert_eq!(s.num_workers, 2);
            let _ = s.to_string();
            reads += 1;
        }
        stop.store(true, SeqCst);
        let rounds = spawner.join().unwrap();
        assert!(reads > 0 && rounds > 0);
    })
}

/// Was a bug, fixed in session 38; before the fix: a fiber's name is written into the dump
/// as given, so a name with a line break breaks the documented "one line per task or fiber"
/// (a grep for a task's line then finds a forged one).
#[test]
fn dump_keeps_one_line_per_fiber_whatever_its_name() {
    watchdog(20, || {
        let rt = Builder::new()
            .worker_threads(1)
            .stall_report(None)
            .build()
            .unwrap();
        let (tx, rx) = weft::chan::bounded::<u8>(0);
        let f = rt
            .block_on(async move {
                Some(
                    fiber::Builder::new()
                        .name("evil\n  task 999999: running on worker 0")
                        .spawn(move || rx.recv_blocking()),
                )
            })
            .unwrap();
        wait_until("the fiber parks", || {
            rt.dump().to_string().contains("parked on chan")
        });
        let d = rt.dump();
        let result = catch_unwind(AssertUnwindSafe(|| check_dump_shape(&d)));
        tx.send_blocking(1).unwrap();
        assert_eq!(f.join().unwrap(), Ok(1));
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    })
}

/// The stall report's extreme thresholds: `Duration::MAX` never reports and keeps the
/// monitor working (a temporary worker still starts); `Duration::ZERO` reports a
/// task that blocks its worker, and the runtime goes on.
#[test]
fn stall_report_extreme_thresholds() {
    watchdog(20, || {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .max_extra_workers(1)
            .stall_report(Some(Duration::MAX))
            .build()
            .unwrap();
        let blocker = rt.spawn(async { std::thread::sleep(Duration::from_millis(800)) });
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        rt.spawn(async {}).join().unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(700),
            "no temporary worker: the monitor is not working"
        );
        blocker.join().unwrap();
        assert_eq!(rt.stats().stalls_reported, 0);
        drop(rt);

        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .max_extra_workers(0)
            .stall_report(Some(Duration::ZERO))
            .build()
            .unwrap();
        rt.spawn(async { std::thread::sleep(Duration::from_millis(200)) })
            .join()
            .unwrap();
        assert!(rt.stats().stalls_reported >= 1);
        assert_eq!(rt.spawn(async { 5 }).join().unwrap(), 5);
    })
}

// ---------------------------------------------------------------------------------
// 3. weft::io over misbehaving readers and writers

/// Polls `fut` on this thread until it is ready (a waker that does nothing: the
/// readers and writers here are ready or pending by their script), at most 10,000
/// times.
fn poll_ready<F: std::future::Future + Unpin>(fut: &mut F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..10_000 {
        if let Poll::Ready(v) = Pin::new(&mut *fut).poll(&mut cx) {
            return v;
        }
    }
    panic!("hang: the future was still pending after 10,000 polls");
}

/// Polls `fut` once.
fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(fut).poll(&mut cx)
}

/// One step of a scripted reader or writer.
#[derive(Clone, Debug)]
enum Step {
    /// Copies these bytes (as many as fit) and returns `Ok(len)` of the claim.
    Data(&'static [u8], usize),
    /// Returns `Ok(n)` without touching the buffer.
    Claim(usize),
    Err(io::ErrorKind),
    Pending,
    Panic,
}

/// A reader or writer that plays `steps`, then answers `Ok(0)` for ever (end of
/// stream, or a writer that takes nothing). Counts its calls.
struct Script {
    steps: std::collections::VecDeque<Step>,
    calls: usize,
    written: Vec<u8>,
}

fn script(steps: &[Step]) -> Script {
    Script {
        steps: steps.iter().cloned().collect(),
        calls: 0,
        written: Vec::new(),
    }
}

/// Data that claims exactly what it copies.
fn data(bytes: &'static [u8]) -> Step {
    Step::Data(bytes, bytes.len())
}

impl Script {
    fn next(&mut self) -> Step {
        self.calls += 1;
        assert!(self.calls < 100_000, "hang: polled 100,000 times");
        self.steps.pop_front().unwrap_or(Step::Claim(0))
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.next() {
            Step::Data(bytes, claim) => {
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                Poll::Ready(Ok(claim))
            }
            Step::Claim(n) => Poll::Ready(Ok(n)),
            Step::Err(kind) => Poll::Ready(Err(io::Error::new(kind, "scripted"))),
            Step::Pending => Poll::Pending,
            Step::Panic => panic!("scripted reader panic"),
        }
    }
}

impl AsyncWrite for Script {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.next() {
            Step::Data(_, claim) | Step::Claim(claim) => {
                let n = claim.min(buf.len());
                self.written.extend_from_slice(&buf[..n]);
                Poll::Ready(Ok(claim))
            }
            Step::Err(kind) => Poll::Ready(Err(io::Error::new(kind, "scripted"))),
            Step::Pending => Poll::Pending,
            Step::Panic => panic!("scripted writer panic"),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.next() {
            Step::Err(kind) => Poll::Ready(Err(io::Error::new(kind, "scripted"))),
            Step::Pending => Poll::Pending,
            Step::Panic => panic!("scripted flush panic"),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.as_mut().poll_flush(cx)
    }
}

/// A reader that claims more bytes than the buffer holds: `read_to_end` and
/// `read_to_string` count only what fits (no panic, no bytes invented past the
/// buffer), as std's guard does.
#[test]
fn read_to_end_and_to_string_survive_readers_that_claim_too_much() {
    let mut r = script(&[
        Step::Data(b"abc", 1_000_000),
        Step::Claim(usize::MAX),
        data(b"z"),
    ]);
    let mut buf = b"pre".to_vec();
    let n = poll_ready(&mut r.read_to_end(&mut buf)).unwrap();
    assert_eq!(n, buf.len() - 3);
    assert!(buf.starts_with(b"preabc"), "{buf:?}");
    assert!(buf.ends_with(b"z"));
    assert!(buf.len() <= 3 + 2 * 1024 * 1024, "grew to {}", buf.len());

    let mut r = script(&[Step::Data(b"hello", 1 << 20), data(b"!")]);
    let mut s = String::from(">");
    let n = poll_ready(&mut r.read_to_string(&mut s)).unwrap();
    assert_eq!(n, s.len() - 1);
    assert!(s.starts_with(">hello") && s.ends_with('!'), "{s:?}");
}

/// `read_exact` over a reader that claims more than the room left: the same guard
/// (the claim counts as filling the buffer), no panic.
#[test]
fn read_exact_survives_a_reader_that_claims_too_much() {
    let mut r = script(&[Step::Data(b"ab", 100)]);
    let mut buf = [0u8; 4];
    assert_eq!(poll_ready(&mut r.read_exact(&mut buf)).unwrap(), 4);
    assert_eq!(&buf[..2], b"ab");
}

/// Was a bug, fixed in session 38; before the fix: `read_exact` adds a reader's claim to
/// its count unchecked (`this.filled += n`): after a partial read, a claim near
/// `usize::MAX` overflows (a panic in debug builds; in release the count wraps and the
/// buffer is read over again). `read_to_end` clamps the same claim (`n.min(room)`).
#[test]
fn read_exact_survives_a_huge_claim_after_a_partial_read() {
    let mut r = script(&[data(b"a"), Step::Claim(usize::MAX)]);
    let mut buf = [0u8; 4];
    let result = catch_unwind(AssertUnwindSafe(|| poll_ready(&mut r.read_exact(&mut buf))));
    match result {
        Ok(Ok(n)) => assert_eq!(n, 4),
        Ok(Err(e)) => assert_ne!(e.kind(), io::ErrorKind::Interrupted),
        Err(p) => panic!(
            "read_exact panicked on a reader's bad claim: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or(p.downcast_ref::<&str>().copied())
        ),
    }
}

/// `Interrupted` is retried by every helper that loops; `WouldBlock` (or any other
/// error) is returned, and `read_to_end` keeps the bytes read before it.
#[test]
fn interrupted_is_retried_and_would_block_is_returned() {
    use io::ErrorKind::{Interrupted, WouldBlock};
    let mut r = script(&[
        Step::Err(Interrupted),
        data(b"ab"),
        Step::Err(Interrupted),
        data(b"cd"),
    ]);
    let mut buf = [0u8; 4];
    assert_eq!(poll_ready(&mut r.read_exact(&mut buf)).unwrap(), 4);
    assert_eq!(&buf, b"abcd");

    let mut r = script(&[data(b"ab"), Step::Err(Interrupted), data(b"c")]);
    let mut v = Vec::new();
    assert_eq!(poll_ready(&mut r.read_to_end(&mut v)).unwrap(), 3);
    assert_eq!(v, b"abc");

    let mut r = script(&[data(b"ab"), Step::Err(WouldBlock), data(b"c")]);
    let mut v = b"x".to_vec();
    let e = poll_ready(&mut r.read_to_end(&mut v)).unwrap_err();
    assert_eq!(e.kind(), WouldBlock);
    assert_eq!(
        v, b"xab",
        "the bytes read before the error stay, and only them"
    );

    let mut r = script(&[data(b"a"), Step::Err(WouldBlock)]);
    let mut buf = [0u8; 4];
    let e = poll_ready(&mut r.read_exact(&mut buf)).unwrap_err();
    assert_eq!(e.kind(), WouldBlock);

    let mut r = script(&[Step::Err(WouldBlock)]);
    let mut buf = [0u8; 4];
    assert_eq!(
        poll_ready(&mut r.read(&mut buf)).unwrap_err().kind(),
        WouldBlock
    );

    let mut w = script(&[
        Step::Err(Interrupted),
        Step::Claim(2),
        Step::Err(Interrupted),
    ]);
    w.steps.push_back(Step::Claim(3));
    poll_ready(&mut w.write_all(b"hello")).unwrap();
    assert_eq!(w.written, b"hello");

    let mut w = script(&[Step::Claim(1), Step::Err(WouldBlock)]);
    let e = poll_ready(&mut w.write_all(b"hello")).unwrap_err();
    assert_eq!(e.kind(), WouldBlock);
    assert_eq!(w.written, b"h");
}

/// `write_all` on a writer that takes no bytes ends with `WriteZero` at once (std's
/// does), also after a partial write; an empty buffer asks the writer nothing.
#[test]
fn write_all_on_a_writer_that_takes_nothing_ends_with_write_zero() {
    watchdog(10, || {
        let mut w = script(&[]);
        let e = poll_ready(&mut w.write_all(b"data")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
        assert_eq!(w.calls, 1);

        let mut w = script(&[Step::Claim(2)]);
        let e = poll_ready(&mut w.write_all(b"data")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
        assert_eq!(w.written, b"da");

        let mut w = script(&[]);
        poll_ready(&mut w.write_all(b"")).unwrap();
        assert_eq!(w.calls, 0);
        // `write` passes the writer's answer on as it is.
        let mut w = script(&[]);
        assert_eq!(poll_ready(&mut w.write(b"data")).unwrap(), 0);
    })
}

/// A writer that claims to have taken more than it was given: `write_all` does not
/// report success for it, and does not loop (an `InvalidData` error since session 40;
/// it used to panic on the slice, as std's and tokio's `write_all` do).
#[test]
fn write_all_does_not_report_success_for_a_writer_that_claims_too_much() {
    watchdog(10, || {
        let mut w = script(&[Step::Claim(2), Step::Claim(100)]);
        let result = catch_unwind(AssertUnwindSafe(|| poll_ready(&mut w.write_all(b"data"))));
        assert!(!matches!(result, Ok(Ok(()))), "reported success");
        assert!(w.calls <= 2, "asked the writer {} times", w.calls);
    })
}

/// `read_to_string` over bytes that are not UTF-8 (also split across reads, or after
/// valid text) fails with `InvalidData` and leaves the string as it was, as std's;
/// a character split across two reads is fine.
#[test]
fn read_to_string_with_bad_utf8_leaves_the_string_unchanged() {
    for steps in [
        vec![data(b"ok \xff")],
        vec![data(b"ok \xc3"), data(b"(")],
        vec![data(b"ok"), data(b"\xe2\x82")],
        vec![data(b"\xed\xa0\x80")], // a UTF-16 surrogate
    ] {
        let mut r = script(&steps);
        let mut s = String::from("before");
        let e = poll_ready(&mut r.read_to_string(&mut s)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{steps:?}");
        assert_eq!(s, "before", "{steps:?}");
    }
    let mut r = script(&[data(b"caf\xc3"), data(b"\xa9")]);
    let mut s = String::from(">");
    assert_eq!(poll_ready(&mut r.read_to_string(&mut s)).unwrap(), 5);
    assert_eq!(s, ">café");
    // An I/O error part-way also leaves it unchanged (documented: what was read is lost).
    let mut r = script(&[data(b"abc"), Step::Err(io::ErrorKind::ConnectionReset)]);
    let mut s = String::from("x");
    let e = poll_ready(&mut r.read_to_string(&mut s)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
    assert_eq!(s, "x");
}

/// A reader that panics in the middle of `read_to_end`: the panic reaches the caller,
/// and once the future is dropped the vector holds exactly the bytes read before it
/// (no zeroes of the spare capacity).
#[test]
fn a_panicking_reader_leaves_read_to_end_consistent() {
    let mut r = script(&[data(b"abc"), Step::Panic, data(b"d")]);
    let mut v = b"<".to_vec();
    {
        let mut fut = r.read_to_end(&mut v);
        let caught = catch_unwind(AssertUnwindSafe(|| poll_once(&mut fut)));
        assert!(caught.is_err(), "the reader's panic was swallowed");
        // Polled again after the panic, it goes on where it was.
        assert_eq!(poll_ready(&mut fut).unwrap(), 4);
    }
    assert_eq!(v, b"<abcd");

    let mut r = script(&[data(b"abc"), Step::Panic]);
    let mut v = b"<".to_vec();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let mut fut = r.read_to_end(&mut v);
        poll_once(&mut fut)
    }));
    assert!(caught.is_err());
    assert_eq!(v, b"<abc");

    let mut r = script(&[data(b"abc"), Step::Panic]);
    let mut s = String::from("<");
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let mut fut = r.read_to_string(&mut s);
        poll_once(&mut fut)
    }));
    assert!(caught.is_err());
    assert_eq!(s, "<");

    let mut w = script(&[Step::Claim(1), Step::Panic]);
    let caught = catch_unwind(AssertUnwindSafe(|| poll_once(&mut w.write_all(b"xyz"))));
    assert!(caught.is_err());
    assert_eq!(w.written, b"x");
}

/// Dropped while pending: `read_to_end` leaves the vector holding what it held plus
/// every byte read (documented), `read_to_string` leaves the string unchanged
/// (documented: not cancel safe), `read_exact` keeps what it wrote into the buffer.
#[test]
fn helpers_dropped_mid_operation_leave_buffers_as_documented() {
    let mut r = script(&[data(b"abc"), Step::Pending, data(b"d")]);
    let mut v = Vec::with_capacity(1000);
    v.extend_from_slice(b"<");
    {
        let mut fut = r.read_to_end(&mut v);
        assert!(poll_once(&mut fut).is_pending());
    }
    assert_eq!(v, b"<abc");
    // The reader goes on from where it was.
    let mut v2 = Vec::new();
    assert_eq!(poll_ready(&mut r.read_to_end(&mut v2)).unwrap(), 1);
    assert_eq!(v2, b"d");

    let mut r = script(&[data(b"abc"), Step::Pending, data(b"d")]);
    let mut s = String::from("<");
    {
        let mut fut = r.read_to_string(&mut s);
        assert!(poll_once(&mut fut).is_pending());
    }
    assert_eq!(s, "<");

    let mut r = script(&[data(b"ab"), Step::Pending]);
    let mut buf = [0u8; 4];
    {
        let mut fut = r.read_exact(&mut buf);
        assert!(poll_once(&mut fut).is_pending());
    }
    assert_eq!(&buf[..2], b"ab");
}

/// A reader, writer, flush and shutdown that stay pending for ever end with the
/// timeout around them; errors from `flush` and `shutdown` reach the caller.
#[test]
fn pending_for_ever_ends_with_a_timeout_and_flush_errors_pass_through() {
    watchdog(10, || {
        let rt = Builder::new()
            .worker_threads(1)
            .stall_report(None)
            .build()
            .unwrap();
        rt.block_on(async {
            let short = Duration::from_millis(30);
            let pending = || {
                let mut s = script(&[]);
                for _ in 0..1000 {
                    s.steps.push_back(Step::Pending);
                }
                s
            };
            let t = Instant::now();
            let mut r = pending();
            let mut buf = [0u8; 8];
            assert!(weft::time::timeout(short, r.read_exact(&mut buf))
                .await
                .is_err());
            let mut v = b"keep".to_vec();
            assert!(weft::time::timeout(short, r.read_to_end(&mut v))
                .await
                .is_err());
            assert_eq!(v, b"keep");
            let mut s = String::from("keep");
            assert!(weft::time::timeout(short, r.read_to_string(&mut s))
                .await
                .is_err());
            assert_eq!(s, "keep");
            let mut w = pending();
            assert!(weft::time::timeout(short, w.write_all(b"x")).await.is_err());
            assert!(weft::time::timeout(short, w.flush()).await.is_err());
            assert!(weft::time::timeout(short, w.shutdown()).await.is_err());
            assert!(t.elapsed() < Duration::from_secs(5));

            let mut w = script(&[Step::Err(io::ErrorKind::BrokenPipe)]);
            assert_eq!(
                w.flush().await.unwrap_err().kind(),
                io::ErrorKind::BrokenPipe
            );
            let mut w = script(&[Step::Err(io::ErrorKind::NotConnected)]);
            assert_eq!(
                w.shutdown().await.unwrap_err().kind(),
                io::ErrorKind::NotConnected
            );
        });
    })
}

// ---------------------------------------------------------------------------------
// 4. The attribute macros with unusual arguments that compile

#[weft::test(worker_threads = 2usize)]
async fn macro_test_with_a_suffix_and_a_trailing_comma() {
    assert_eq!(Handle::current().stats().num_workers, 2);
}

#[weft::test(worker_threads = 0_1)]
async fn macro_test_with_an_underscored_literal() {
    assert_eq!(Handle::current().stats().num_workers, 1);
}

/// An unsafe async fn keeps its `unsafe`.
#[weft::main(worker_threads = 1)]
async unsafe fn macro_main_unsafe() -> usize {
    Handle::current().stats().num_workers
}

/// A count the macro accepts but the runtime refuses: the function panics with the
/// builder's clear message, not something obscure.
#[weft::main(worker_threads = 5000)]
async fn macro_main_too_many_workers() -> u8 {
    1
}

struct InImpl;

impl InImpl {
    /// In an impl block, with a where clause and a return type naming `fn`.
    #[weft::main(worker_threads = 1)]
    async fn associated() -> fn() -> u8
    where
        u8: Copy,
    {
        fn three() -> u8 {
            3
        }
        three
    }
}

#[test]
fn macro_main_with_unusual_arguments() {
    watchdog(20, || {
        // SAFETY: the function does nothing unsafe.
        assert_eq!(unsafe { macro_main_unsafe() }, 1);
        assert_eq!(InImpl::associated()(), 3);
        let err = catch_unwind(macro_main_too_many_workers).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("weft: failed to build the runtime") && msg.contains("at most 4096"),
            "{msg:?}"
        );
    })
}
