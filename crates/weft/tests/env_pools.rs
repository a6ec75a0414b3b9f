//! `WEFT_INTERACTIVE` and `WEFT_STATS`, checked in child processes (the environment is
//! process-wide, so each case runs this test binary again).

mod common;

use common::{child, with_timeout};

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

/// Runs `child_print_pools` in a child process with `vars`; returns (the interactive
/// pool's size, stderr).
fn run_child(vars: &[(&str, &str)]) -> (usize, String) {
    let mut all = vec![(CHILD, "1")];
    all.extend_from_slice(vars);
    let out = child::run("child_print_pools", &all, child::LIMIT);
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let n = out
        .report("interactive")
        .unwrap_or_else(|| panic!("no report in:\n{stdout}"))
        .parse()
        .unwrap();
    (n, out.stderr)
}

#[test]
fn weft_interactive_sets_the_interactive_pool_size() {
    with_timeout(|| {
        assert_eq!(run_child(&[]).0, 1, "default: one interactive worker");
        assert_eq!(run_child(&[("WEFT_INTERACTIVE", "3")]).0, 3);
        assert_eq!(
            run_child(&[("WEFT_INTERACTIVE", "0")]).0,
            0,
            "zero: no pool"
        );
    })
}

#[test]
fn a_malformed_weft_interactive_is_reported_and_ignored() {
    with_timeout(|| {
        let (n, stderr) = run_child(&[("WEFT_INTERACTIVE", "lots")]);
        assert_eq!(n, 1);
        assert!(stderr.contains("WEFT_INTERACTIVE"), "{stderr}");
    })
}

#[test]
fn weft_stats_prints_every_pool_when_the_runtime_drops() {
    with_timeout(|| {
        let (_, stderr) = run_child(&[("WEFT_STATS", "1")]);
        assert!(stderr.contains("Default pool"), "{stderr}");
        assert!(stderr.contains("Interactive pool"), "{stderr}");
        assert!(stderr.contains("blocking pool"), "{stderr}");
        assert!(stderr.contains("timers"), "{stderr}");
    })
}
