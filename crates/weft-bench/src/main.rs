//! `weft-bench`: side-by-side benchmarks of weft against its peers, all in
//! one process and one run, with one runtime alive at a time.
//!
//! ```text
//! cargo run --release -p weft-bench -- async [--workers N] [--rounds R] [--json FILE] [--case NAME]
//! ```
//!
//! Each subcommand is a [`harness::Suite`]; add one by adding an entry to
//! [`COMMANDS`].

mod cases_async;
mod harness;
mod runtimes;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use harness::{Error, Options, Suite};

/// A subcommand: a named suite of cases.
struct Command {
    name: &'static str,
    about: &'static str,
    suite: fn() -> Suite,
}

/// All subcommands, in the order `--help` lists them.
const COMMANDS: &[Command] = &[Command {
    name: "async",
    about: "async tasks: weft vs tokio (multi-thread) vs async-executor",
    suite: cases_async::suite,
}];

const DEFAULT_WORKERS: usize = 2;
const DEFAULT_ROUNDS: usize = 11;
const DEFAULT_TIMEOUT_S: u64 = 120;

fn usage() -> String {
    let mut s = String::from(
        "weft-bench: side-by-side benchmarks, weft against its peers\n\n\
         USAGE:\n    cargo run --release -p weft-bench -- <COMMAND> [OPTIONS]\n\n\
         COMMANDS:\n",
    );
    for c in COMMANDS {
        s.push_str(&format!("    {:<10}{}\n", c.name, c.about));
    }
    s.push_str(&format!(
        "\nOPTIONS:\n\
         \x20   --workers N      worker threads for every runtime (default {DEFAULT_WORKERS})\n\
         \x20   --rounds R       rounds per case; the median is reported (default {DEFAULT_ROUNDS})\n\
         \x20   --json FILE      also write the results as JSON to FILE\n\
         \x20   --case NAME      run only case NAME (repeatable, or a comma-separated list)\n\
         \x20   --timeout SECS   abort if one measurement takes longer (default {DEFAULT_TIMEOUT_S})\n\
         \x20   --list           list the cases of COMMAND and exit\n\
         \x20   -h, --help       print this help and exit\n\n\
         Every round builds each runtime fresh, warms it up with one untimed\n\
         iteration, then times it; runtimes take turns in a rotating order and\n\
         only one is alive at a time. Ratios below 1.0 mean weft is faster.\n\n\
         EXIT STATUS: 0 ok, 1 a measurement failed, 2 bad arguments, 3 timeout\n"
    ));
    s
}

/// What the command line asks for.
enum Request {
    Help,
    List(&'static Command),
    Run(&'static Command, Options),
}

fn parse(args: &[String]) -> Result<Request, String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Request::Help);
    }
    let Some((name, rest)) = args.split_first() else {
        return Err("missing COMMAND".into());
    };
    let command = COMMANDS
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("unknown command '{name}'"))?;

    let mut opts = Options {
        workers: DEFAULT_WORKERS,
        rounds: DEFAULT_ROUNDS,
        json: None,
        cases: Vec::new(),
        timeout: Duration::from_secs(DEFAULT_TIMEOUT_S),
    };
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
            "--json" => opts.json = Some(PathBuf::from(value("a file name")?)),
            "--case" => {
                let v = value("a case name")?;
                for name in v.split(',').filter(|n| !n.is_empty()) {
                    opts.cases.push(name.to_string());
                }
            }
            "--list" if inline.is_none() => list = true,
            _ => return Err(format!("unexpected argument '{arg}'")),
        }
    }
    Ok(if list {
        Request::List(command)
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

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("error: {msg}\n\nRun 'weft-bench --help' for usage.");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Err(msg) => usage_error(&msg),
        Ok(Request::Help) => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        Ok(Request::List(command)) => {
            for case in (command.suite)().cases {
                println!("{}", case.name);
            }
            ExitCode::SUCCESS
        }
        Ok(Request::Run(command, opts)) => match harness::run(&(command.suite)(), &opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(Error::Usage(msg)) => usage_error(&msg),
            Err(Error::Failed(msg)) => {
                eprintln!("error: {msg}");
                ExitCode::from(1)
            }
        },
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
        assert!(matches!(parse(&args("async --help")), Ok(Request::Help)));
    }
}
