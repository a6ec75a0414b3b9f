//! Review (session 28) of sysmon's nudge for unheld drivers (commit b50f81e:
//! `runtime::sysmon::nudge_for_the_drivers`, the generation hold word of
//! `driver::timer::Driver`, `Core::park`), from safe code only.
//!
//! The attack: a worker that held the timer and I/O drivers wakes to run a task that
//! then blocks its thread (a long poll); nobody is left in `epoll_wait`. sysmon should
//! nudge a sleeping worker of any pool, which takes the drivers, so another task's
//! socket event or sleep is served within about two sysmon periods. And the nudge must
//! cost nothing where it is not needed: an idle runtime (sockets registered, timers far
//! away) makes no wake-ups, nor does a runtime whose only running worker spins in one
//! poll while another sleeps holding the drivers.
//!
//! Every test is bounded by a watchdog that aborts the process (a hang is a finding).
//! Tests that found a bug assert the correct behaviour and are `#[ignore = "finding:
//! ..."]`, with a comment saying what happens.
//!
//! Found, and documented as a limit (`Builder::max_extra_workers`): with
//! `stall_report(None)` and `max_extra_workers(0)` no sysmon runs, so the nudge never
//! comes and a socket event waits for a blocked holder (`*_no_sysmon`, ignored). Held: latency with sysmon on (1-3 workers, with and
//! without the interactive pool, both directions), no wake-ups when idle or beside a
//! long poll, no nudges per socket event, temporary workers retiring, drops.

mod common;
use common::join_within;

use std::io;
use std::time::{Duration, Instant};

use weft::io::AsyncReadExt;
use weft::net::{TcpListener, TcpStream};
use weft::{Builder, Pool, Runtime};

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// Aborts the process if not dropped within `secs` (see `common::abort_after`).
fn watchdog(secs: u64, what: &'static str) -> common::AbortGuard {
    common::abort_after(secs, what)
}

/// A runtime configuration under test.
#[derive(Clone, Copy, Debug)]
struct Config {
    workers: usize,
    interactive: usize,
    /// `Some(0)`: temporary workers off.
    extra: Option<usize>,
    /// `true`: `stall_report(None)`.
    no_stall: bool,
}

impl Config {
    const fn new(workers: usize, interactive: usize) -> Config {
        Config {
            workers,
            interactive,
            extra: None,
            no_stall: false,
        }
    }
    const fn no_temp(self) -> Config {
        Config {
            extra: Some(0),
            ..self
        }
    }
    const fn no_stall(self) -> Config {
        Config {
            no_stall: true,
            ..self
        }
    }
    fn build(self) -> Runtime {
        let mut b = Builder::new();
        b.worker_threads(self.workers)
            .interactive_threads(self.interactive);
        if let Some(n) = self.extra {
            b.max_extra_workers(n);
        }
        if self.no_stall {
            b.stall_report(None);
        } else {
            // The documented default, whatever the environment says.
            b.stall_report(Some(Duration::from_secs(5)));
        }
        b.build().unwrap()
    }
}

/// A connected pair (server side, client side) registered with `rt`.
fn pair(rt: &Runtime) -> (TcpStream, TcpStream) {
    rt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (s, c)
    })
}

/// A blocking `write_all` through `std::io::Write for &TcpStream`.
fn bwrite_all(s: &TcpStream, buf: &[u8]) -> io::Result<()> {
    io::Write::write_all(&mut &*s, buf)
}

/// Futex wakes made to workers, parks and wake-ups (spurious or met spinning), over
/// every pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wakes {
    wake_calls: u64,
    parked: u64,
    spurious: u64,
    spin: u64,
}

fn wakes(rt: &Runtime) -> Wakes {
    let s = rt.stats();
    let mut w = Wakes {
        wake_calls: 0,
        parked: 0,
        spurious: 0,
        spin: 0,
    };
    for p in &s.pools {
        w.wake_calls += p.total_wake_calls;
        w.parked += p.total_parked;
        w.spurious += p.total_spurious_wakeups;
        w.spin += p.total_spin_wakeups;
    }
    w
}

fn delta(a: Wakes, b: Wakes) -> Wakes {
    Wakes {
        wake_calls: b.wake_calls - a.wake_calls,
        parked: b.parked - a.parked,
        spurious: b.spurious - a.spurious,
        spin: b.spin - a.spin,
    }
}

/// Spins on this thread for `d` (a CPU-bound poll).
fn spin_for(d: Duration) {
    let t = Instant::now();
    let mut x = 0u64;
    while t.elapsed() < d {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// What the victim task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    /// A byte on its socket, sent 50 ms after the blocker blocked.
    Socket,
    /// A 100 ms sleep, started 0-50 ms before the blocker blocked.
    Timer,
}

/// Keeps the workers of `pool` busy for 150 ms and waits 50 ms into it, so that the
/// other pool's workers go to park first and one of them takes the drivers.
fn busy_pool_for_a_while(rt: &Runtime, pool: Pool) -> Vec<weft::JoinHandle<()>> {
    let n = rt
        .stats()
        .pools
        .iter()
        .find(|p| p.pool == pool)
        .map_or(0, |p| p.num_workers);
    let hs = (0..n)
        .map(|_| {
            rt.spawn_on(pool, async {
                std::thread::sleep(Duration::from_millis(150));
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    hs
}

/// `blockers` tasks of pool `a`, each woken by its socket in turn (so each runs on the
/// worker that then held the drivers) and then blocking its thread for `block`; then a
/// victim task of pool `b` waits for a socket event or a sleep. When `a` and `b` are
/// different pools, `b`'s workers are kept busy while `a`'s park, so that a worker of
/// `a` holds the drivers when the first blocker is woken. Returns how late the victim
/// woke.
fn blocked_holder_round(
    rt: &Runtime,
    a: Pool,
    blockers: usize,
    block: Duration,
    b: Pool,
    victim: Victim,
) -> Duration {
    let busy = if a != b {
        busy_pool_for_a_while(rt, b)
    } else {
        Vec::new()
    };
    let mut handles = Vec::new();
    let mut triggers = Vec::new();
    for _ in 0..blockers {
        let (s, c) = pair(rt);
        triggers.push(c);
        handles.push(rt.spawn_on(a, async move {
            let mut s = s;
            let mut byte = [0; 1];
            s.read_exact(&mut byte).await.unwrap();
            std::thread::sleep(block);
        }));
    }
    for h in busy {
        join_within(h, 10).unwrap();
    }
    let (s2, c2) = pair(rt);
    // Every worker parked (one holding the drivers) before the first trigger.
    std::thread::sleep(Duration::from_millis(60));
    let victim_h = rt.spawn_on(b, async move {
        let mut s2 = s2;
        match victim {
            Victim::Socket => {
                let mut byte = [0; 1];
                s2.read_exact(&mut byte).await.unwrap();
            }
            Victim::Timer => weft::time::sleep(Duration::from_millis(100)).await,
        }
        Instant::now()
    });
    let start = Instant::now();
    for c in &triggers {
        bwrite_all(c, b"a").unwrap();
        // Long enough for the holder to wake and block, and for sysmon to hand the
        // drivers to the next sleeper.
        std::thread::sleep(Duration::from_millis(50));
    }
    let due = match victim {
        Victim::Socket => {
            bwrite_all(&c2, b"b").unwrap();
            Instant::now()
        }
        Victim::Timer => start + Duration::from_millis(100),
    };
    let woke = join_within(victim_h, 10).unwrap();
    for h in handles {
        join_within(h, 10).unwrap();
    }
    drop(triggers);
    woke.saturating_duration_since(due)
}

/// Runs `rounds` of [`blocked_holder_round`] on a runtime of `cfg` and returns the
/// lateness of each.
fn latency(
    cfg: Config,
    a: Pool,
    blockers: usize,
    b: Pool,
    victim: Victim,
    rounds: usize,
) -> Vec<Duration> {
    let rt = cfg.build();
    (0..rounds)
        .map(|_| blocked_holder_round(&rt, a, blockers, Duration::from_millis(800), b, victim))
        .collect()
}

/// Asserts that every round's victim was served within `limit` (about two sysmon
/// periods, with room for a loaded machine).
fn assert_served(what: &str, late: &[Duration], limit: Duration) {
    let worst = late.iter().max().copied().unwrap_or_default();
    assert!(
        worst < limit,
        "{what}: a victim waited for a blocked holder (late by {late:?}, limit {limit:?})"
    );
}

const LIMIT: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------
// 1. Latency: a socket event or a sleep while the holder runs a long poll
// ---------------------------------------------------------------------------------

/// Three default workers, two of them blocked one after the other (each woken by its
/// socket while it held the drivers); the third sleeps and must be nudged, after the
/// second block too, to read a third task's socket.
#[test]
fn three_workers_two_blocked_holders_socket() {
    let _w = watchdog(60, "three_workers_two_blocked_holders_socket");
    let late = latency(
        Config::new(3, 0),
        Pool::Default,
        2,
        Pool::Default,
        Victim::Socket,
        3,
    );
    assert_served("3 workers, 2 blocked, socket", &late, LIMIT);
}

/// The same with a sleep: the first holder hands the drivers on for the pending timer
/// (to a peer of its pool), the second one too; the third worker fires it.
#[test]
fn three_workers_two_blocked_holders_timer() {
    let _w = watchdog(60, "three_workers_two_blocked_holders_timer");
    let late = latency(
        Config::new(3, 0),
        Pool::Default,
        2,
        Pool::Default,
        Victim::Timer,
        3,
    );
    assert_served("3 workers, 2 blocked, timer", &late, LIMIT);
}

/// The reverse of `review_net`'s interactive cases: the interactive worker holds the
/// drivers, is woken by its socket and blocks; a default task's socket event must not
/// wait for it.
#[test]
fn default_socket_while_the_interactive_holder_is_blocked() {
    let _w = watchdog(60, "default_socket_while_the_interactive_holder_is_blocked");
    let late = latency(
        Config::new(1, 1),
        Pool::Interactive,
        1,
        Pool::Default,
        Victim::Socket,
        3,
    );
    assert_served("interactive holder blocked, default socket", &late, LIMIT);
}

/// The same for a default task's sleep (the hand-off for timers stays in the holder's
/// pool, where nobody else is).
#[test]
fn default_timer_while_the_interactive_holder_is_blocked() {
    let _w = watchdog(60, "default_timer_while_the_interactive_holder_is_blocked");
    let late = latency(
        Config::new(1, 1),
        Pool::Interactive,
        1,
        Pool::Default,
        Victim::Timer,
        3,
    );
    assert_served("interactive holder blocked, default timer", &late, LIMIT);
}

/// Two default workers and an interactive one; a default holder blocks; the nudge
/// (pool 0 first) goes to the other default worker, which must serve the interactive
/// task's socket too.
#[test]
fn interactive_socket_while_a_default_holder_is_blocked_two_defaults() {
    let _w = watchdog(60, "interactive_socket_..._two_defaults");
    let late = latency(
        Config::new(2, 1),
        Pool::Default,
        1,
        Pool::Interactive,
        Victim::Socket,
        3,
    );
    assert_served(
        "2+1, default holder blocked, interactive socket",
        &late,
        LIMIT,
    );
}

/// `stall_report(None)` with temporary workers on: sysmon still runs (every 5 ms).
#[test]
fn interactive_socket_while_the_default_holder_is_blocked_no_stall_report() {
    let _w = watchdog(60, "interactive_socket_..._no_stall_report");
    let late = latency(
        Config::new(1, 1).no_stall(),
        Pool::Default,
        1,
        Pool::Interactive,
        Victim::Socket,
        3,
    );
    assert_served("1+1 stall_report(None), interactive socket", &late, LIMIT);
}

/// `max_extra_workers(0)` with the default stall report (5 s): sysmon looks every
/// 100 ms, so the nudge comes after 100-200 ms (two looks), within the limit but only
/// just on a loaded machine. Asserted at 350 ms here; the latencies are printed.
#[test]
fn interactive_timer_while_the_default_holder_is_blocked_no_temp_workers() {
    let _w = watchdog(60, "interactive_timer_..._no_temp_workers");
    let late = latency(
        Config::new(1, 1).no_temp(),
        Pool::Default,
        1,
        Pool::Interactive,
        Victim::Timer,
        3,
    );
    eprintln!("1+1 max_extra_workers(0): late by {late:?}");
    assert_served(
        "1+1 max_extra_workers(0), interactive timer",
        &late,
        Duration::from_millis(350),
    );
}

/// `max_extra_workers(0)` with the default stall report, a socket event: sysmon looks
/// every 100 ms, so the event waits for up to two looks (the word must be seen unheld
/// and unchanged twice). Printed; asserted at 350 ms.
#[test]
fn interactive_socket_while_the_default_holder_is_blocked_no_temp_workers() {
    let _w = watchdog(60, "interactive_socket_..._no_temp_workers");
    let late = latency(
        Config::new(1, 1).no_temp(),
        Pool::Default,
        1,
        Pool::Interactive,
        Victim::Socket,
        3,
    );
    eprintln!("1+1 max_extra_workers(0), socket: late by {late:?}");
    assert_served(
        "1+1 max_extra_workers(0), interactive socket",
        &late,
        Duration::from_millis(350),
    );
}

/// FINDING: with `stall_report(None)` and `max_extra_workers(0)` no sysmon runs (it
/// starts "only if the stall report or temporary workers are on"), so nobody nudges:
/// the bug that b50f81e fixed (`review_net::interactive_pool_sees_io_while_the_default_
/// worker_is_blocked`) is back in this configuration. An interactive task's socket
/// event waits for the blocked default worker's poll to end (about 750 ms late here,
/// the whole block). Neither the "Unheld drivers" bullet of ARCHITECTURE.md nor the
/// Builder docs say that the nudge depends on the monitor running.
#[test]
#[ignore = "documented limit (Builder::max_extra_workers): with stall_report(None) + max_extra_workers(0) no sysmon runs, so the unheld-driver nudge never comes; an interactive task's socket waits for the blocked default holder"]
fn interactive_socket_while_the_default_holder_is_blocked_no_sysmon() {
    let _w = watchdog(60, "interactive_socket_..._no_sysmon");
    let late = latency(
        Config::new(1, 1).no_temp().no_stall(),
        Pool::Default,
        1,
        Pool::Interactive,
        Victim::Socket,
        2,
    );
    assert_served("1+1 no sysmon, interactive socket", &late, LIMIT);
}

/// FINDING (same cause): two default workers, no sysmon; the holder is woken by its
/// socket and blocks; the other worker sleeps on its futex, and a second task's socket
/// event waits for the blocked one (`review_net::an_idle_worker_sees_io_while_another_
/// is_blocked` in the configuration without a monitor).
#[test]
#[ignore = "documented limit (Builder::max_extra_workers): with stall_report(None) + max_extra_workers(0) no sysmon runs; a socket event waits for a blocked holder while the other worker sleeps"]
fn two_workers_socket_while_the_holder_is_blocked_no_sysmon() {
    let _w = watchdog(60, "two_workers_socket_..._no_sysmon");
    let late = latency(
        Config::new(2, 0).no_temp().no_stall(),
        Pool::Default,
        1,
        Pool::Default,
        Victim::Socket,
        2,
    );
    assert_served("2 workers no sysmon, socket", &late, LIMIT);
}

// ---------------------------------------------------------------------------------
// 2. No wake-ups where none are needed
// ---------------------------------------------------------------------------------

/// Registers sockets (a listener with a pending accept, a pair with a pending read) and
/// far timers (a sleep and a timeout of an hour) in every pool of `rt`; returns what
/// keeps them alive.
fn park_work_far_away(rt: &Runtime) -> (Vec<weft::JoinHandle<()>>, Vec<TcpStream>) {
    let mut hs = Vec::new();
    let mut keep = Vec::new();
    let pools: Vec<Pool> = rt.stats().pools.iter().map(|p| p.pool).collect();
    for pool in pools {
        let (s, c) = pair(rt);
        keep.push(c);
        hs.push(rt.spawn_on(pool, async move {
            let mut s = s;
            let mut b = [0; 1];
            let _ = s.read_exact(&mut b).await;
        }));
        let l = rt.block_on(async { TcpListener::bind("127.0.0.1:0").await.unwrap() });
        hs.push(rt.spawn_on(pool, async move {
            let _ = l.accept().await;
        }));
        hs.push(rt.spawn_on(pool, async {
            weft::time::sleep(Duration::from_secs(3600)).await;
        }));
        hs.push(rt.spawn_on(pool, async {
            let _ =
                weft::time::timeout(Duration::from_secs(3600), std::future::pending::<()>()).await;
        }));
    }
    (hs, keep)
}

/// An idle runtime with sockets registered and timers an hour away makes no wake-ups
/// at all: no futex wake, no park, over 300 ms (after a settling time).
fn idle_round(cfg: Config) {
    let rt = cfg.build();
    let (hs, keep) = park_work_far_away(&rt);
    std::thread::sleep(Duration::from_millis(400));
    let st = rt.stats();
    assert!(st.io_sources >= 2 && st.timers_pending >= 2, "{st:?}");
    let before = wakes(&rt);
    std::thread::sleep(Duration::from_millis(300));
    let after = wakes(&rt);
    let d = delta(before, after);
    assert_eq!(
        d,
        Wakes {
            wake_calls: 0,
            parked: 0,
            spurious: 0,
            spin: 0
        },
        "{cfg:?}: an idle runtime with sockets and far timers woke its workers"
    );
    for h in &hs {
        h.abort();
    }
    drop(keep);
    drop(rt);
}

#[test]
fn idle_runtime_makes_no_wakeups() {
    let _w = watchdog(60, "idle_runtime_makes_no_wakeups");
    for cfg in [
        Config::new(1, 0),
        Config::new(2, 0),
        Config::new(3, 0),
        Config::new(1, 1),
        Config::new(2, 1),
        Config::new(2, 1).no_temp(),
        Config::new(1, 1).no_stall(),
        Config::new(2, 0).no_temp().no_stall(),
    ] {
        idle_round(cfg);
    }
}

/// One worker runs a long poll (`cpu`: spinning; else blocked in `thread::sleep`)
/// after holding the drivers (woken by its socket), while sockets are registered and
/// timers are far away. The other workers sleep, one of them nudged once to take the
/// drivers. From 200 ms into the poll to 700 ms, nothing should wake anyone: the count
/// of futex wakes in that window is returned.
fn long_poll_wakes(cfg: Config, a: Pool, cpu: bool) -> (Wakes, Duration) {
    let rt = cfg.build();
    let (hs, keep) = park_work_far_away(&rt);
    let other = if a == Pool::Default {
        Pool::Interactive
    } else {
        Pool::Default
    };
    let busy = if cfg.interactive > 0 {
        busy_pool_for_a_while(&rt, other)
    } else {
        Vec::new()
    };
    let (s, c) = pair(&rt);
    let blocker = rt.spawn_on(a, async move {
        let mut s = s;
        let mut b = [0; 1];
        s.read_exact(&mut b).await.unwrap();
        if cpu {
            spin_for(Duration::from_millis(800));
        } else {
            std::thread::sleep(Duration::from_millis(800));
        }
    });
    for h in busy {
        join_within(h, 10).unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    bwrite_all(&c, b"a").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let before = wakes(&rt);
    std::thread::sleep(Duration::from_millis(500));
    let after = wakes(&rt);
    // And the drivers were served meanwhile: a fresh socket's event comes at once.
    let (s2, c2) = pair(&rt);
    let probe = rt.spawn_on(other_or(a, cfg), async move {
        let mut s2 = s2;
        let mut b = [0; 1];
        s2.read_exact(&mut b).await.unwrap();
        Instant::now()
    });
    std::thread::sleep(Duration::from_millis(20));
    let sent = Instant::now();
    bwrite_all(&c2, b"b").unwrap();
    let probe_late = join_within(probe, 10)
        .unwrap()
        .saturating_duration_since(sent);
    join_within(blocker, 10).unwrap();
    for h in &hs {
        h.abort();
    }
    drop((keep, c));
    (delta(before, after), probe_late)
}

/// The pool a probe task goes to: the other pool if there is one, else `a`.
fn other_or(a: Pool, cfg: Config) -> Pool {
    match (a, cfg.interactive > 0) {
        (Pool::Default, true) => Pool::Interactive,
        (Pool::Interactive, _) => Pool::Default,
        _ => a,
    }
}

fn assert_quiet(cfg: Config, a: Pool, cpu: bool) {
    let (d, probe_late) = long_poll_wakes(cfg, a, cpu);
    eprintln!("{cfg:?} {a:?} cpu={cpu}: {d:?} probe late by {probe_late:?}");
    assert!(
        d.wake_calls <= 1 && d.spurious <= 1 && d.parked <= 1,
        "{cfg:?}, {a:?} worker in a long poll (cpu: {cpu}): workers woke in 500 ms: {d:?}"
    );
    assert!(
        probe_late < LIMIT,
        "{cfg:?}, {a:?} worker in a long poll (cpu: {cpu}): a socket event waited {probe_late:?}"
    );
}

#[test]
fn long_blocking_poll_makes_no_nudge_storm() {
    let _w = watchdog(60, "long_blocking_poll_makes_no_nudge_storm");
    for cfg in [
        Config::new(2, 0),
        Config::new(3, 0),
        Config::new(2, 0).no_stall(),
    ] {
        assert_quiet(cfg, Pool::Default, false);
    }
}

#[test]
fn long_cpu_poll_makes_no_nudge_storm() {
    let _w = watchdog(60, "long_cpu_poll_makes_no_nudge_storm");
    for cfg in [Config::new(2, 0), Config::new(2, 0).no_temp()] {
        assert_quiet(cfg, Pool::Default, true);
    }
}

#[test]
fn long_poll_across_pools_makes_no_nudge_storm() {
    let _w = watchdog(60, "long_poll_across_pools_makes_no_nudge_storm");
    assert_quiet(Config::new(1, 1), Pool::Default, false);
    assert_quiet(Config::new(1, 1), Pool::Interactive, true);
    assert_quiet(Config::new(2, 1).no_temp(), Pool::Default, false);
}

/// One worker runs a long poll while another task's socket gets a byte every 10 ms
/// (it echoes nothing, just reads): each event wakes the holder in `epoll_wait` (no
/// futex wake), which runs the reader and takes the drivers again as it parks. The
/// hold word moves at every event, so sysmon has no reason to nudge: futex wakes stay
/// far below one per event.
#[test]
fn socket_traffic_beside_a_long_poll_costs_no_nudges() {
    let _w = watchdog(60, "socket_traffic_beside_a_long_poll_costs_no_nudges");
    for cfg in [Config::new(2, 0), Config::new(1, 1)] {
        let rt = cfg.build();
        let (s, c) = pair(&rt);
        let (s2, c2) = pair(&rt);
        let blocker = rt.spawn(async move {
            let mut s = s;
            let mut b = [0; 1];
            s.read_exact(&mut b).await.unwrap();
            std::thread::sleep(Duration::from_millis(900));
        });
        const EVENTS: usize = 50;
        let reader = rt.spawn_on(other_or(Pool::Default, cfg), async move {
            let mut s2 = s2;
            let mut b = [0; 1];
            for _ in 0..EVENTS {
                s2.read_exact(&mut b).await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(150));
        bwrite_all(&c, b"a").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = wakes(&rt);
        let t = Instant::now();
        for _ in 0..EVENTS {
            bwrite_all(&c2, b"x").unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        join_within(reader, 10).unwrap();
        let took = t.elapsed();
        let after = wakes(&rt);
        join_within(blocker, 10).unwrap();
        let d = delta(before, after);
        eprintln!("{cfg:?}: {EVENTS} events in {took:?}: {d:?}");
        assert!(
            d.wake_calls <= (EVENTS / 5) as u64,
            "{cfg:?}: {EVENTS} socket events beside a long poll cost {d:?}"
        );
        assert!(
            took < Duration::from_millis(EVENTS as u64 * 10 + 500),
            "{cfg:?}: the events waited for the blocked worker ({took:?})"
        );
    }
}

// ---------------------------------------------------------------------------------
// 3. Temporary workers, churn, and drops while sysmon nudges
// ---------------------------------------------------------------------------------

/// One base worker with a temporary one allowed (keep-alive 30 ms). In each round the
/// base worker blocks for 300 ms with a task queued behind it (a temporary worker
/// starts), while a socket task and a sleep wait; after the block everything idles
/// long enough for the temporary worker to retire (maybe holding the drivers). Socket
/// events and sleeps must be served in every phase.
#[test]
fn temporary_worker_retiring_with_the_drivers_loses_no_wakeup() {
    let _w = watchdog(
        60,
        "temporary_worker_retiring_with_the_drivers_loses_no_wakeup",
    );
    for interactive in [0, 1] {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(interactive)
            .max_extra_workers(1)
            .extra_worker_keep_alive(Duration::from_millis(30))
            .build()
            .unwrap();
        let (s, c) = pair(&rt);
        let reader = rt.spawn(async move {
            let mut s = s;
            let mut b = [0; 1];
            let mut n = 0;
            while s.read_exact(&mut b).await.is_ok() {
                n += 1;
                if b[0] == b'q' {
                    break;
                }
            }
            n
        });
        for round in 0..3 {
            let (sb, cb) = pair(&rt);
            let blocker = rt.spawn(async move {
                let mut sb = sb;
                let mut b = [0; 1];
                sb.read_exact(&mut b).await.unwrap();
                std::thread::sleep(Duration::from_millis(300));
            });
            std::thread::sleep(Duration::from_millis(30));
            bwrite_all(&cb, b"a").unwrap();
            std::thread::sleep(Duration::from_millis(30));
            // Queued behind the blocked worker: a temporary worker starts for it.
            let quick = rt.spawn(async { 1 });
            assert_eq!(join_within(quick, 10).unwrap(), 1);
            // A sleep and a socket event during the block.
            let t = Instant::now();
            let sleeper = rt.spawn(async {
                weft::time::sleep(Duration::from_millis(40)).await;
                Instant::now()
            });
            bwrite_all(&c, b"x").unwrap();
            let woke = join_within(sleeper, 10).unwrap();
            assert!(
                woke - t < Duration::from_millis(40) + LIMIT,
                "round {round} (interactive {interactive}): a 40 ms sleep took {:?} \
                 while the base worker was blocked",
                woke - t
            );
            join_within(blocker, 10).unwrap();
            // Idle: the temporary worker retires.
            let t = Instant::now();
            while rt.stats().temp_workers_retired < rt.stats().temp_workers_started
                && t.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(50));
            // After the retirement: a sleep from outside, and a socket event.
            let t = Instant::now();
            let sleeper = rt.spawn(async {
                weft::time::sleep(Duration::from_millis(40)).await;
                Instant::now()
            });
            let woke = join_within(sleeper, 10).unwrap();
            assert!(
                woke - t < Duration::from_millis(40) + LIMIT,
                "round {round} (interactive {interactive}): a 40 ms sleep took {:?} \
                 after a temporary worker retired",
                woke - t
            );
            drop(cb);
        }
        let st = rt.stats();
        assert!(st.temp_workers_started >= 1, "{st:?}");
        bwrite_all(&c, b"q").unwrap();
        assert_eq!(join_within(reader, 10).unwrap(), 4);
    }
}

/// Churn over both pools: tasks that sleep short random-ish times, exchange bytes over
/// loopback sockets, and now and then block their worker for 30 ms (so holders keep
/// waking into long polls, sysmon nudges, and temporary workers come and go). Every
/// task finishes, and none takes much longer than its own sleeps and blocks.
#[test]
fn churn_with_blocking_holders_loses_no_wakeup() {
    let _w = watchdog(60, "churn_with_blocking_holders_loses_no_wakeup");
    for cfg in [
        Config::new(2, 1),
        Config::new(1, 1).no_temp(),
        Config::new(3, 0),
    ] {
        let rt = cfg.build();
        let mut hs = Vec::new();
        let t = Instant::now();
        for i in 0..12u64 {
            let (s, c) = pair(&rt);
            let pool = if i % 3 == 0 && cfg.interactive > 0 {
                Pool::Interactive
            } else {
                Pool::Default
            };
            // The echo side.
            hs.push(rt.spawn_on(pool, async move {
                let mut s = s;
                let mut b = [0; 1];
                for _ in 0..10 {
                    if s.read_exact(&mut b).await.is_err() {
                        break;
                    }
                    weft::io::AsyncWriteExt::write_all(&mut s, &b)
                        .await
                        .unwrap();
                }
            }));
            // The driving side.
            hs.push(rt.spawn_on(pool, async move {
                let mut c = c;
                let mut b = [0; 1];
                for k in 0..10u64 {
                    weft::time::sleep(Duration::from_millis(1 + (i * 7 + k * 3) % 9)).await;
                    weft::io::AsyncWriteExt::write_all(&mut c, &[k as u8])
                        .await
                        .unwrap();
                    c.read_exact(&mut b).await.unwrap();
                    assert_eq!(b[0], k as u8);
                    if (i + k) % 7 == 0 {
                        std::thread::sleep(Duration::from_millis(30));
                    }
                }
            }));
        }
        for h in hs {
            join_within(h, 20).unwrap();
        }
        let took = t.elapsed();
        eprintln!("{cfg:?}: churn took {took:?}");
        // Each driver: at most ~100 ms of sleeps and ~60 ms of blocks; all together
        // on a loaded two-core machine, far under this.
        assert!(
            took < Duration::from_secs(8),
            "{cfg:?}: churn took {took:?}"
        );
    }
}

/// Runtimes dropped while a worker is blocked after holding the drivers, with sockets
/// and timers registered: sysmon is nudging (or about to) when the drop begins. Every
/// drop ends, and the sockets outlive their runtime.
#[test]
fn drop_while_sysmon_nudges() {
    let _w = watchdog(60, "drop_while_sysmon_nudges");
    let mut keep = Vec::new();
    for i in 0..12u64 {
        let cfg = match i % 3 {
            0 => Config::new(1, 1),
            1 => Config::new(2, 0),
            _ => Config::new(2, 1).no_temp(),
        };
        let rt = cfg.build();
        let (s, c) = pair(&rt);
        let (s2, c2) = pair(&rt);
        rt.spawn(async move {
            let mut s = s;
            let mut b = [0; 1];
            let _ = s.read_exact(&mut b).await;
            std::thread::sleep(Duration::from_millis(40));
        });
        rt.spawn_on(other_or(Pool::Default, cfg), async move {
            let mut s2 = s2;
            let mut b = [0; 1];
            let _ = s2.read_exact(&mut b).await;
        });
        rt.spawn(async {
            weft::time::sleep(Duration::from_secs(30)).await;
        });
        std::thread::sleep(Duration::from_millis(20));
        bwrite_all(&c, b"a").unwrap();
        // Into the block, at a sysmon look or two (5-10 ms apart).
        std::thread::sleep(Duration::from_millis(3 + i % 10));
        let t = Instant::now();
        drop(rt);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{cfg:?}: the drop took {:?}",
            t.elapsed()
        );
        keep.push((c, c2));
    }
}
