//! Measurements run in a child process of this executable: the fiber cases of several
//! suites run each measurement in a fresh process, so one contender's stacks, threads
//! and allocator state do not weigh on the next one's figure.

use std::process::{Command, Stdio};

/// Runs this executable as `arg name contender workers`, checks that it succeeded and
/// returns the figure it printed after `prefix` on its last such line.
pub fn run(arg: &str, prefix: &str, name: &str, contender: &str, workers: usize) -> f64 {
    let exe = std::env::current_exe().expect("cannot find this executable");
    let out = Command::new(exe)
        .args([arg, name, contender, &workers.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot start the {name} child: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the {name} child for {contender} failed ({}); its output: {stdout}",
        out.status
    );
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("the {name} child printed no result: {stdout}"));
    line.trim()
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("bad figure '{line}' from the {name} child: {e}"))
}

/// A child's first step: die with the parent (e.g. when its watchdog aborts a hung
/// run), so no orphan keeps measuring.
pub fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory of
    // ours.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
}

/// The unit tests that run may in this process take turns: may keeps one scheduler per
/// process, and with two of them driving it at once may's event loop once panicked in
/// its own code ("RefCell already borrowed" in `EventData::fast_schedule`, under a
/// connect, while another test's coroutines ran).
#[cfg(test)]
pub fn may_in_process() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
