//! `WEFT_INTERACTIVE` and `WEFT_STATS`, checked in child processes (the environment is
//! process-wide, so each case runs this test binary again).

use std::process::Command;

const CHILD: &str = "WEFT_ENV_POOLS_CHILD";

/// Not a real test unless run as a child: prints the pool sizes of a default runtime.
#[test]
fn child_print_pools() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let rt = weft::Runtime::new().expect("the runtime failed to build");
    assert_eq!(
        rt.spawn_on(weft::Pool::Interactive, async { 5 })
            .join()
            .unwrap(),
        5
    );
    let pools = rt.stats().pools;
    let interactive = pools
        .iter()
        .find(|p| p.pool == weft::Pool::Interactive)
        .map_or(0, |p| p.num_workers);
    println!("CHILD interactive={interactive}");
}

fn run_child(vars: &[(&str, &str)]) -> (usize, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "child_print_pools",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env_remove("WEFT_INTERACTIVE")
    .env_remove("WEFT_STATS")
    .env_remove("WEFT_VERBOSE");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let n = stdout
        .lines()
        .find_map(|l| l.split("CHILD interactive=").nth(1))
        .unwrap_or_else(|| panic!("no report in:\n{stdout}"))
        .trim()
        .parse()
        .unwrap();
    (n, stderr)
}

#[test]
fn weft_interactive_sets_the_interactive_pool_size() {
    assert_eq!(run_child(&[]).0, 1, "default: one interactive worker");
    assert_eq!(run_child(&[("WEFT_INTERACTIVE", "3")]).0, 3);
    assert_eq!(
        run_child(&[("WEFT_INTERACTIVE", "0")]).0,
        0,
        "zero: no pool"
    );
}

#[test]
fn a_malformed_weft_interactive_is_reported_and_ignored() {
    let (n, stderr) = run_child(&[("WEFT_INTERACTIVE", "lots")]);
    assert_eq!(n, 1);
    assert!(stderr.contains("WEFT_INTERACTIVE"), "{stderr}");
}

#[test]
fn weft_stats_prints_every_pool_when_the_runtime_drops() {
    let (_, stderr) = run_child(&[("WEFT_STATS", "1")]);
    assert!(stderr.contains("Default pool"), "{stderr}");
    assert!(stderr.contains("Interactive pool"), "{stderr}");
    assert!(stderr.contains("blocking pool"), "{stderr}");
    assert!(stderr.contains("timers"), "{stderr}");
}
