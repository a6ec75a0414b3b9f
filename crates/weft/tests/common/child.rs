//! Runs one test of this test binary again in a child process (for what is
//! process-wide: the environment, an abort, a runtime that must not leak into other
//! tests), with a time limit.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The usual limit for a child: well under [`super::TIMEOUT`], so that a test body
/// under `with_timeout` kills a hung child (rather than leave it running) before it
/// times out itself.
pub const LIMIT: Duration = Duration::from_secs(10);

/// weft's own environment variables: removed for every child, so that each starts from
/// the defaults and sets only what it tests.
const WEFT_VARS: &[&str] = &[
    "WEFT_WORKERS",
    "WEFT_INTERACTIVE",
    "WEFT_STACK_SIZE",
    "WEFT_STATS",
    "WEFT_VERBOSE",
    "WEFT_DEBUG_STALL",
    "WEFT_DEBUG_LOCKS",
    "WEFT_DEBUG_DEADLOCK",
    "WEFT_DEBUG_SYSMON",
    "WEFT_MAX_EXTRA_WORKERS",
];

/// What a child process did.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    /// Status and output, for assertion messages.
    pub fn context(&self) -> String {
        format!(
            "child status {}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// Asserts that the child exited normally after printing `CHILD done=ok` (its
    /// whole case ran).
    pub fn assert_finished(&self) {
        use std::os::unix::process::ExitStatusExt;
        let context = self.context();
        if let Some(sig) = self.status.signal() {
            panic!("the child was killed by signal {sig}\n{context}");
        }
        assert!(self.status.success(), "{context}");
        assert_eq!(
            self.report("done"),
            Some("ok"),
            "the child did not finish its case\n{context}"
        );
    }

    /// The value the child printed as a `CHILD key=value` line, trimmed.
    pub fn report(&self, key: &str) -> Option<&str> {
        // libtest may print "test child_... ... " on the same line.
        self.stdout
            .lines()
            .find_map(|l| l.split(&format!("CHILD {key}=")).nth(1))
            .map(str::trim)
    }
}

/// Runs case `case` of this binary's `child_process_entry` test, which picks the case
/// from the variable `var`, in a child process (see [`run`]).
pub fn run_case(var: &str, case: &str, limit: Duration) -> Output {
    run("child_process_entry", &[(var, case)], limit)
}

/// [`run_case`] with weft's lock diagnostics on (`WEFT_DEBUG_LOCKS=1`), 20 s at most;
/// asserts that the child finished its case.
pub fn run_case_with_lock_checks(var: &str, case: &str) -> Output {
    let out = run(
        "child_process_entry",
        &[(var, case), ("WEFT_DEBUG_LOCKS", "1")],
        Duration::from_secs(20),
    );
    out.assert_finished();
    out
}

/// Runs the test `test` (its exact name) of this binary in a child process, with
/// `vars` set and [`WEFT_VARS`] otherwise removed; kills it and panics with "hang"
/// if it has not exited after `limit`.
pub fn run(test: &str, vars: &[(&str, &str)], limit: Duration) -> Output {
    let vars: Vec<(&str, &[u8])> = vars.iter().map(|&(k, v)| (k, v.as_bytes())).collect();
    run_with_bytes(test, &vars, limit)
}

/// [`run`] with variable values given as raw bytes (a value may be non-UTF-8).
pub fn run_with_bytes(test: &str, vars: &[(&str, &[u8])], limit: Duration) -> Output {
    use std::os::unix::ffi::OsStrExt;
    let start = Instant::now();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in WEFT_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in vars {
        cmd.env(k, std::ffi::OsStr::from_bytes(v));
    }
    let mut child = cmd.spawn().unwrap();
    // Drain both pipes on threads so a chatty child cannot block on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "hang: child {test:?} with {vars:?} did not exit within {limit:?}\nstderr:\n{}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed: start.elapsed(),
    }
}
