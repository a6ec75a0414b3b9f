//! `weft-bench`: side-by-side benchmarks of weft against its peers, one
//! command (suite) per run, one contender measured at a time (the `fiber`
//! suite measures each in a child process of its own).
//!
//! ```text
//! cargo run --release -p weft-bench -- <COMMAND> [--workers N] [--rounds R] [--json FILE] [--case NAME]
//! ```
//!
//! Commands: `async` (task scheduling), `wake` (wake-ups and idle cost),
//! `pools` (cross-pool latency), `timers` (sleeps, timeouts, accuracy),
//! `forkjoin` (join, parallel iterators and sorts against rayon and chili),
//! `fiber` (fibers against may's coroutines), `chan` (channels against
//! crossbeam-channel, flume, kanal, std, tokio, async-channel and may), `sync`
//! (issue 16's primitives against tokio, may, parking_lot and std), `net` (a TCP
//! echo against tokio and may), `sysmon` (short tasks while one task blocks a
//! worker: weft's temporary workers against weft without them and tokio), `http`
//! (hyper on weft against hyper on tokio, weft's fiber server and may_minihttp,
//! under wrk).
//! Each subcommand is a [`harness::Suite`]; add one by adding an entry to
//! [`COMMANDS`]. `--json FILE` also draws `FILE.svg` (the [`chart`] of the
//! report); `weft-bench chart FILE.json ...` draws it again for saved reports.
//!
//! ```text
//! cargo run --release -p weft-bench -- scaling OUT.svg FILE.json...
//! ```
//!
//! draws how one suite's medians change with the worker count from its
//! reports at several `--workers` (one line per contender, a panel per case:
//! see [`scaling`]) and prints them as a markdown table.

mod alloc_count;
mod cases_async;
mod cases_chan;
mod cases_fiber;
mod cases_forkjoin;
mod cases_http;
mod cases_net;
mod cases_pools;
mod cases_sync;
mod cases_sysmon;
mod cases_timers;
mod cases_wake;
mod chan_peers;
mod chan_shapes;
mod chan_weft;
mod chart;
mod child;
mod countdown;
mod cputime;
mod fiber_sync;
mod harness;
mod load;
mod rng;
mod runtimes;
mod scaling;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use harness::{Error, Options, Suite};

/// Counts allocations for the `chan` suite's `alloc_spsc` (a relaxed load
/// more per allocation while nothing counts).
#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

/// A subcommand: a named suite of cases.
struct Command {
    name: &'static str,
    about: &'static str,
    /// What `<COMMAND> --help` prints above the options.
    help: &'static str,
    /// Builds the suite; some suites' cases depend on the options
    /// (`forkjoin`: `--workers`, `--large`).
    suite: fn(&Options) -> Suite,
    /// Prints more after the table (`http`: every round, as markdown).
    report: Option<fn()>,
}

/// All subcommands, in the order `--help` lists them.
const COMMANDS: &[Command] = &[
    Command {
        name: "async",
        about: "async tasks: weft vs tokio (multi-thread) vs async-executor",
        help: "Spawning, waking, yielding and joining tasks, modelled on tokio's\n\
               benches/rt_multi_threaded.rs; one row per case, mean time per unit.",
        suite: |_| cases_async::suite(),
        report: None,
    },
    Command {
        name: "wake",
        about: "wake economy and idle cost: weft vs tokio",
        help: "burst_N (N = 1, 2, 8, 64, 1024): N spawns from a plain thread into a runtime\n\
               whose workers all sleep. Per burst: wall time; process CPU time (getrusage,\n\
               user + sys, until 20 ms after the burst, minus a 20 ms idle window before\n\
               it); for weft, futex wake calls per spawned task (target <= 1) and spurious\n\
               wake-ups as a share of them (target < 10 %).\n\
               idle, idle_timer (an hour-long sleep pending), idle_interactive (weft with\n\
               1 interactive worker): CPU time per second of idle (target for weft\n\
               < 1 ms/s) and weft's wake calls and parks in the window (target 0);\n\
               one measurement per runtime (1 round), --idle-secs long.\n\
               weft runs without its interactive pool except in idle_interactive.",
        suite: |_| cases_wake::suite(),
        report: None,
    },
    Command {
        name: "pools",
        about: "cross-pool latency under load: weft interactive pool vs a second tokio runtime",
        help: "busy_10us, busy_1ms: with the main pool saturated by 2 x workers busy tasks\n\
               (each spins 10 us or 1 ms, then yields, until stopped), the median and p99\n\
               time from a spawn (plain thread) to the task's first poll; 2,000 probes per\n\
               round with random 0..200 us gaps. weft: spawn_on(Interactive) with one\n\
               interactive worker; tokio: spawn into a second 1-worker runtime;\n\
               weft-default (reference): plain spawn into weft's busy default pool.",
        suite: |_| cases_pools::suite(),
        report: None,
    },
    Command {
        name: "timers",
        about: "timers: weft vs tokio (time driver enabled)",
        help: "sleeps_100k: 100,000 tasks sleeping uniform 0..100 ms (same seed); total\n\
               time, throughput, mean lateness. timeout_cancel: 1,000,000 x create a\n\
               10 s timeout around a pending future, poll it once, drop it; per cycle.\n\
               accuracy: 500 sequential 10 ms sleeps while `workers` tasks keep every\n\
               worker busy; median and p99 lateness. weft runs without its interactive pool.",
        suite: |_| cases_timers::suite(),
        report: None,
    },
    Command {
        name: "forkjoin",
        about: "fork-join: weft vs rayon vs chili (and a sequential baseline)",
        help: cases_forkjoin::HELP,
        suite: cases_forkjoin::suite,
        report: None,
    },
    Command {
        name: "fiber",
        about: "fibers: weft vs may (stackful coroutines)",
        help: cases_fiber::HELP,
        suite: cases_fiber::suite,
        report: None,
    },
    Command {
        name: "chan",
        about: "channels: weft vs crossbeam, flume, kanal, std (threads), tokio, async-channel (tasks), may (fibers)",
        help: cases_chan::HELP,
        suite: cases_chan::suite,
        report: None,
    },
    Command {
        name: "net",
        about: "TCP echo over loopback: weft vs tokio (tasks), may (fibers)",
        help: cases_net::HELP,
        suite: cases_net::suite,
        report: None,
    },
    Command {
        name: "sync",
        about: "sync primitives: weft vs tokio (tasks), may (fibers), parking_lot and std (threads)",
        help: cases_sync::HELP,
        suite: cases_sync::suite,
        report: None,
    },
    Command {
        name: "sysmon",
        about: "short tasks while one task blocks a worker: weft (temporary workers) vs weft without vs tokio",
        help: cases_sysmon::HELP,
        suite: |_| cases_sysmon::suite(),
        report: None,
    },
    Command {
        name: "http",
        about: "HTTP servers under wrk: hyper on weft vs hyper on tokio, weft fibers, may_minihttp",
        help: cases_http::HELP,
        suite: cases_http::suite,
        report: Some(cases_http::print_markdown),
    },
];

const DEFAULT_WORKERS: usize = 2;
const DEFAULT_ROUNDS: usize = 11;
const DEFAULT_TIMEOUT_S: u64 = 120;
const DEFAULT_IDLE_S: f64 = 2.0;

/// The global help, or with `command` that command's.
fn usage(command: Option<&Command>) -> String {
    let mut s = String::from("weft-bench: side-by-side benchmarks, weft against its peers\n\n");
    match command {
        None => {
            s.push_str(
                "USAGE:\n    cargo run --release -p weft-bench -- <COMMAND> [OPTIONS]\n\n\
                 COMMANDS:\n",
            );
            for c in COMMANDS {
                s.push_str(&format!("    {:<10}{}\n", c.name, c.about));
            }
            s.push_str(&format!(
                "    {:<10}draw FILE.svg beside each saved report FILE.json\n",
                "chart"
            ));
            s.push_str(&format!("    {:<10}{SCALING_ABOUT}\n", "scaling"));
            s.push_str(&format!(
                "\nRun 'weft-bench <COMMAND> --help' for what a command measures.\n\n{SCALING_USAGE}"
            ));
        }
        Some(c) => {
            s.push_str(&format!(
                "USAGE:\n    cargo run --release -p weft-bench -- {} [OPTIONS]\n\n{}\n\n{}\n\nCASES: {}\n",
                c.name,
                c.about,
                c.help,
                (c.suite)(&default_options()).case_names()
            ));
        }
    }
    s.push_str(&format!(
        "\nOPTIONS:\n\
         \x20   --workers N      worker threads for every runtime (default {DEFAULT_WORKERS})\n\
         \x20   --rounds R       rounds per case; the median is reported (default {DEFAULT_ROUNDS})\n\
         \x20   --json FILE      also write the results as JSON to FILE, and its chart\n\
         \x20                    as FILE.svg (the extension replaced)\n\
         \x20   --case NAME      run only case NAME (repeatable, or a comma-separated list)\n\
         \x20   --timeout SECS   abort if one measurement takes longer (default {DEFAULT_TIMEOUT_S})\n\
         \x20   --idle-secs S    how long the idle cases of 'wake' sit idle (default {DEFAULT_IDLE_S})\n\
         \x20   --large          'forkjoin': also run the 134,217,727-node tree (about 4 GB)\n\
         \x20   --list           list the cases of COMMAND and exit\n\
         \x20   -h, --help       print this help and exit\n\n\
         Every round measures each contender once, in a rotating order; a\n\
         measurement builds the contender's runtime or pool fresh (tokio in\n\
         'pools': two runtimes; 'fiber': in a child process), warms it up untimed\n\
         (each command its own way, e.g. one iteration in 'async', >= 20 ms of\n\
         calls in 'forkjoin'), times it and shuts it down before the next one.\n\
         Ratio columns weft/X: below 1.0 = weft lower (faster, for times); a\n\
         baseline's column X/weft ('forkjoin' seq/weft): above 1.0 = weft faster;\n\
         rates (per second, higher is better) get no ratio.\n\n\
         EXIT STATUS: 0 ok, 1 a measurement failed, 2 bad arguments, 3 timeout\n"
    ));
    s
}

/// What the command line asks for.
enum Request {
    Help(Option<&'static Command>),
    List(&'static Command, Options),
    Run(&'static Command, Options),
}

/// The options when none are given.
fn default_options() -> Options {
    Options {
        workers: DEFAULT_WORKERS,
        rounds: DEFAULT_ROUNDS,
        json: None,
        cases: Vec::new(),
        timeout: Duration::from_secs(DEFAULT_TIMEOUT_S),
        idle: Duration::from_secs_f64(DEFAULT_IDLE_S),
        large: false,
    }
}

fn parse(args: &[String]) -> Result<Request, String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        let command = args
            .first()
            .and_then(|a| COMMANDS.iter().find(|c| c.name == a));
        return Ok(Request::Help(command));
    }
    let Some((name, rest)) = args.split_first() else {
        return Err("missing COMMAND".into());
    };
    let command = COMMANDS
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("unknown command '{name}'"))?;

    let mut opts = default_options();
    let mut list = false;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        // Accept both `--opt value` and `--opt=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value ({what})"))
        };
        match flag {
            "--workers" => opts.workers = positive(flag, &value("a thread count")?)?,
            "--rounds" => opts.rounds = positive(flag, &value("a round count")?)?,
            "--timeout" => {
                opts.timeout = Duration::from_secs(positive(flag, &value("seconds")?)? as u64)
            }
            "--idle-secs" => {
                let v = value("seconds")?;
                opts.idle = match v.parse::<f64>() {
                    Ok(x) if x > 0.0 && x <= 3600.0 => Duration::from_secs_f64(x),
                    _ => return Err(format!("{flag} expects seconds in (0, 3600], got '{v}'")),
                };
            }
            "--json" => opts.json = Some(PathBuf::from(value("a file name")?)),
            "--case" => {
                let v = value("a case name")?;
                for name in v.split(',').filter(|n| !n.is_empty()) {
                    opts.cases.push(name.to_string());
                }
            }
            "--list" if inline.is_none() => list = true,
            "--large" if inline.is_none() => opts.large = true,
            _ => return Err(format!("unexpected argument '{arg}'")),
        }
    }
    Ok(if list {
        Request::List(command, opts)
    } else {
        Request::Run(command, opts)
    })
}

fn positive(flag: &str, v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} expects a positive integer, got '{v}'")),
    }
}

const SCALING_ABOUT: &str = "chart and tabulate one suite's reports at several worker counts";

const SCALING_USAGE: &str = "\
SCALING:
    cargo run --release -p weft-bench -- scaling OUT.svg FILE.json...

    FILE.json...: reports of one suite (--json) at different --workers, e.g.
    forkjoin-w1.json ... forkjoin-w16.json, all from one machine. Draws
    OUT.svg: a panel per case and metric measured as a time or a rate
    (counts and percentages are left out), x = workers, y = the median (both
    log scales), a line per contender. Prints a markdown table to stdout: each
    contender's medians at each worker count, and weft's speed-up over the
    fastest peer at the most workers.
";

/// `weft-bench scaling OUT.svg FILE.json ...`: draws the scaling chart of
/// one suite's reports and prints their table.
fn scaling_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("weft-bench scaling: {SCALING_ABOUT}\n\n{SCALING_USAGE}");
        return ExitCode::SUCCESS;
    }
    let Some((out, files)) = args.split_first() else {
        return usage_error("scaling needs OUT.svg and one or more JSON reports");
    };
    let files: Vec<&std::path::Path> = files.iter().map(std::path::Path::new).collect();
    match scaling::scaling_files(std::path::Path::new(out), &files) {
        Ok(table) => {
            print!("{table}");
            eprintln!("wrote {out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// `weft-bench chart FILE.json ...`: draws the chart of each saved report
/// beside it (`FILE.svg`).
fn chart_main(files: &[String]) -> ExitCode {
    if files.is_empty() {
        return usage_error("chart needs one or more JSON reports");
    }
    let mut status = ExitCode::SUCCESS;
    for f in files {
        match chart::chart_file(std::path::Path::new(f)) {
            Ok(svg) => println!("wrote {}", svg.display()),
            Err(e) => {
                eprintln!("error: {e}");
                status = ExitCode::from(1);
            }
        }
    }
    status
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("error: {msg}\n\nRun 'weft-bench --help' for usage.");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(cases_fiber::CHILD_ARG) {
        return cases_fiber::child_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(cases_chan::CHILD_ARG) {
        return cases_chan::child_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(cases_sync::CHILD_ARG) {
        return cases_sync::child_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(cases_net::CHILD_ARG) {
        return cases_net::child_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(cases_http::SERVE_ARG) {
        return cases_http::serve_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("chart") {
        return chart_main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("scaling") {
        return scaling_main(&args[1..]);
    }
    match parse(&args) {
        Err(msg) => usage_error(&msg),
        Ok(Request::Help(command)) => {
            print!("{}", usage(command));
            ExitCode::SUCCESS
        }
        Ok(Request::List(command, opts)) => {
            for case in (command.suite)(&opts).cases {
                println!("{}", case.name);
            }
            ExitCode::SUCCESS
        }
        Ok(Request::Run(command, opts)) => {
            let result = harness::run(&(command.suite)(&opts), &opts);
            if let (Some(report), false) = (command.report, matches!(result, Err(Error::Usage(_))))
            {
                report();
            }
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(Error::Usage(msg)) => usage_error(&msg),
                Err(Error::Failed(msg)) => {
                    eprintln!("error: {msg}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_options() {
        let Ok(Request::Run(c, o)) = parse(&args(
            "async --workers 4 --rounds=13 --case ping_pong,yield_many --json out.json",
        )) else {
            panic!("expected a run request");
        };
        assert_eq!(c.name, "async");
        assert_eq!((o.workers, o.rounds), (4, 13));
        assert_eq!(o.cases, ["ping_pong", "yield_many"]);
        assert_eq!(o.json, Some(PathBuf::from("out.json")));
    }

    #[test]
    fn rejects_bad_arguments() {
        for bad in [
            "",
            "nope",
            "async --workers 0",
            "async --workers x",
            "async --rounds",
            "async --bogus",
        ] {
            assert!(parse(&args(bad)).is_err(), "accepted '{bad}'");
        }
        assert!(matches!(parse(&args("--help")), Ok(Request::Help(None))));
        assert!(matches!(
            parse(&args("wake --help")),
            Ok(Request::Help(Some(Command { name: "wake", .. })))
        ));
        assert!(parse(&args("wake --idle-secs 0")).is_err());
    }

    #[test]
    fn chan_suite_definition() {
        let Ok(Request::Run(c, o)) = parse(&args(
            "chan --rounds 3 --case threads_bounded0_spsc,fibers_unbounded_select_rx",
        )) else {
            panic!("expected a run request");
        };
        assert_eq!((c.name, o.rounds), ("chan", 3));
        let suite = (c.suite)(&o);
        assert_eq!(suite.contenders[0], "weft");
        // 3 ways x (5 + 5 + 6 + 6) cases (no seq on bounded0 / bounded1),
        // and the allocation count.
        assert_eq!(suite.cases.len(), 3 * 22 + 1);
        for way in ["threads", "tasks", "fibers"] {
            for name in [
                "bounded0_spsc",
                "bounded1_select_both",
                "bounded_seq",
                "unbounded_mpmc",
            ] {
                let name = format!("{way}_{name}");
                let case = suite.cases.iter().find(|c| c.name == name);
                let case = case.unwrap_or_else(|| panic!("no case {name}"));
                assert_eq!(case.metrics.len(), 1, "{name}");
            }
            assert!(!suite
                .cases
                .iter()
                .any(|c| c.name == format!("{way}_bounded0_seq")));
        }
        let alloc = suite.cases.iter().find(|c| c.name == "alloc_spsc").unwrap();
        assert_eq!(alloc.metrics.len(), 4);
        assert!(alloc.metrics[..3].iter().all(|m| m.target.is_some()));
        for name in &o.cases {
            assert!(suite.cases.iter().any(|c| &c.name == name), "{name}");
        }
        assert!(
            parse(&args("chan --case nope")).is_ok(),
            "case names are checked when run"
        );
    }

    #[test]
    fn every_command_has_cases_and_parses_idle() {
        for c in COMMANDS {
            let suite = (c.suite)(&default_options());
            assert_eq!(suite.command, c.name);
            assert!(!suite.cases.is_empty());
            for case in &suite.cases {
                assert!(!case.metrics.is_empty(), "{} has no metric", case.name);
            }
        }
        let Ok(Request::Run(_, o)) = parse(&args("wake --idle-secs=0.5")) else {
            panic!("expected a run request");
        };
        assert_eq!(o.idle, Duration::from_millis(500));
    }
}
