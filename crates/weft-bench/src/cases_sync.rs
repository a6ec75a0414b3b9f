//! The `sync` suite (issue 16): weft's synchronization primitives
//! (`weft::sync`) against their peers, three ways:
//!
//! * `sem_*`, `rwlock_*`, `notify_*`, `mpsc_*`: the cases of tokio's own
//!   `benches/sync_semaphore.rs`, `sync_rwlock.rs`, `sync_notify.rs` and
//!   `sync_mpsc.rs`, written once (the `tokio_cases!` macro) and run with
//!   weft's primitive on a weft runtime (no interactive pool) against
//!   tokio's on a tokio multi-thread runtime, both with `--workers` workers
//!   (tokio's benches use 6, and a current-thread runtime for the
//!   `*_single` / `read_concurrent*` cases; weft has no current-thread
//!   runtime, so those run the same `join!` inside `block_on` on the
//!   multi-thread runtime). weft has no `sync::mpsc`: the `mpsc_*` cases
//!   run weft's `chan` (`bounded(n)` for tokio's `channel(n)`, `unbounded()`
//!   with `try_send` for tokio's `unbounded_channel()`); weft's channel has
//!   no `recv_many`, so there it is `recv().await` and then `try_recv` up to
//!   the limit. tokio's `create_medium` group (channel construction only)
//!   is left out.
//! * `fibers_mutex_N`: N weft fibers incrementing a counter under a
//!   `weft::sync::Mutex` with `lock_blocking` (which suspends the fiber)
//!   against N may coroutines with `may::sync::Mutex`, `--workers` worker
//!   threads, each measurement in a fresh child process (may keeps one
//!   scheduler per process).
//! * `threads_mutex_N`: N plain threads incrementing a counter under
//!   `weft::sync::Mutex::lock_blocking` against `parking_lot::Mutex` and
//!   `std::sync::Mutex`. No runtime is alive.
//!
//! Every case checks its result (acquisitions counted, values read and
//! received summed, the counter exact, every notification counted), so a
//! broken primitive fails the measurement instead of giving a fast figure.
//!
//! For a smoke test, `WEFT_BENCH_SYNC_SCALE=N` divides every iteration
//! count by N.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{Case, Check, Metric, Options, Suite, Unit};
use crate::runtimes::Weft;

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &["weft", "tokio", "may", "parking_lot", "std"];
const WEFT: usize = 0;
const TOKIO: usize = 1;
const MAY: usize = 2;
const PARKING_LOT: usize = 3;
const STD: usize = 4;

/// The hidden first argument that makes this binary run one `fibers_*`
/// measurement as a child process (see [`child_main`]).
pub const CHILD_ARG: &str = "__sync-child";
/// The child's result line starts with this, followed by ns per operation.
const RESULT_PREFIX: &str = "SYNC-RESULT";
/// Divides every iteration count, for smoke tests.
const SCALE_ENV: &str = "WEFT_BENCH_SYNC_SCALE";

/// What `sync --help` prints above the options.
pub const HELP: &str = "\
sem_*, rwlock_*, notify_*, mpsc_*: the cases of tokio's benches/sync_semaphore.rs,
  sync_rwlock.rs, sync_notify.rs and sync_mpsc.rs; weft's primitive on a weft runtime vs
  tokio's on a tokio runtime, --workers workers each (tokio's benches: 6 workers, and a
  current-thread runtime for *_single / rwlock_read_concurrent*: here the same join! in
  block_on on the multi-thread runtime; weft has no current-thread runtime). Time per
  iteration of tokio's loop body (one block_on: e.g. 6 acquires, 6 spawned readers,
  5,000 messages; notify_*: notifications until the waiters counted 500).
  weft has no sync::mpsc: mpsc_* run weft::chan (bounded(n) for channel(n), unbounded()
  with try_send for unbounded_channel()); weft's channel has no recv_many, so *_recv_many
  is recv().await then try_recv up to the limit. tokio's create_medium is left out.
  Targets: weft at least as fast as tokio on every case, at least 1.5x on the contended ones
  (sem_contended_*, rwlock_contended_*, mpsc_contended_*).
fibers_mutex_N: N weft fibers each incrementing a shared counter under weft::sync::Mutex
  (lock_blocking: the fiber suspends) vs N may coroutines with may::sync::Mutex, --workers
  workers, each measurement in a fresh child process; time per increment.
  Target: weft at least as fast as may.
threads_mutex_N: N plain threads incrementing a shared counter under
  weft::sync::Mutex::lock_blocking vs parking_lot::Mutex vs std::sync::Mutex; time per
  increment (no target in the issue: a reference). weft's Mutex is fair (a released lock is
  handed to the first waiter); parking_lot's and std's let the releasing thread re-lock.
Every case checks its result (the counter exact, every acquisition, read and message
  counted), so a broken primitive fails rather than giving a fast figure.
WEFT_BENCH_SYNC_SCALE=N divides every iteration count by N (smoke tests).";

// ---------------------------------------------------------------- cases ----

/// tokio's `mpsc` contention shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chan {
    /// `channel(1_000_000)`: never full.
    Bounded,
    /// `channel(100)`: senders wait for room.
    BoundedFull,
    /// `unbounded_channel()`.
    Unbounded,
}

/// A case of tokio's sync benches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokioCase {
    /// `uncontended/multi`: 6 acquire/release in one `block_on`.
    SemUncontended,
    /// `*/concurrent_multi`: 6 spawned tasks, each acquire/release.
    SemConcurrentMulti { permits: usize },
    /// `*/concurrent_single`: 6 joined futures, each acquire/release.
    SemConcurrentSingle { permits: usize },
    /// `uncontended/read`: 6 reads in one `block_on`.
    RwRead,
    /// `uncontended/read_concurrent_multi`: 6 spawned readers.
    RwReadConcurrentMulti,
    /// `uncontended/read_concurrent`: 6 joined readers.
    RwReadConcurrent,
    /// `contention/read_concurrent_multi`: write held, then dropped beside 5
    /// spawned readers.
    RwContendedMulti,
    /// `contention/read_concurrent`: the same with 5 joined readers.
    RwContended,
    /// `notify_one/N`.
    NotifyOne { waiters: usize },
    /// `notify_waiters/N`.
    NotifyWaiters { waiters: usize },
    /// `uncontented/*`: one task sends 5,000 then receives them.
    MpscUncontended { chan: Chan, recv_many: bool },
    /// `contention/*`: 5 spawned senders x 1,000, the `block_on` receives.
    MpscContended { chan: Chan, recv_many: bool },
    /// `send/medium_1000`, `send/large_1000`: a fresh `channel(1000)`, one
    /// `block_on(send)` and one `block_on(recv)` of a 512 B / 32 KiB value.
    MpscSend { large: bool },
}

/// A case of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncCase {
    Tokio(TokioCase),
    /// N fibers / coroutines on one mutex.
    Fibers(usize),
    /// N threads on one mutex.
    Threads(usize),
}

impl TokioCase {
    /// tokio's contended variants (the 1.5x target).
    fn contended(self) -> bool {
        matches!(
            self,
            TokioCase::SemConcurrentMulti { permits: 5 }
                | TokioCase::SemConcurrentSingle { permits: 5 }
                | TokioCase::RwContendedMulti
                | TokioCase::RwContended
                | TokioCase::MpscContended { .. }
        )
    }
}

fn chan_name(chan: Chan, recv_many: bool) -> String {
    let c = match chan {
        Chan::Bounded => "bounded",
        Chan::BoundedFull => "bounded_full",
        Chan::Unbounded => "unbounded",
    };
    if recv_many {
        format!("{c}_recv_many")
    } else {
        c.to_string()
    }
}

impl SyncCase {
    /// Every case, in the order they run.
    pub fn all() -> Vec<SyncCase> {
        use TokioCase::*;
        let mut v = vec![
            SemUncontended,
            SemConcurrentMulti { permits: 10 },
            SemConcurrentSingle { permits: 10 },
            SemConcurrentMulti { permits: 5 },
            SemConcurrentSingle { permits: 5 },
            RwRead,
            RwReadConcurrentMulti,
            RwReadConcurrent,
            RwContendedMulti,
            RwContended,
        ];
        for waiters in [10, 100, 500] {
            v.push(NotifyOne { waiters });
        }
        for waiters in [10, 100, 500] {
            v.push(NotifyWaiters { waiters });
        }
        for chan in [Chan::Bounded, Chan::Unbounded] {
            for recv_many in [false, true] {
                v.push(MpscUncontended { chan, recv_many });
            }
        }
        for chan in [Chan::Bounded, Chan::BoundedFull, Chan::Unbounded] {
            for recv_many in [false, true] {
                v.push(MpscContended { chan, recv_many });
            }
        }
        v.push(MpscSend { large: false });
        v.push(MpscSend { large: true });
        let mut all: Vec<SyncCase> = v.into_iter().map(SyncCase::Tokio).collect();
        all.extend([1, 4, 16].map(SyncCase::Fibers));
        all.extend([1, 2, 4].map(SyncCase::Threads));
        all
    }

    pub fn name(self) -> String {
        use TokioCase::*;
        match self {
            SyncCase::Tokio(t) => match t {
                SemUncontended => "sem_uncontended".into(),
                SemConcurrentMulti { permits: 10 } => "sem_uncontended_concurrent_multi".into(),
                SemConcurrentSingle { permits: 10 } => "sem_uncontended_concurrent_single".into(),
                SemConcurrentMulti { .. } => "sem_contended_concurrent_multi".into(),
                SemConcurrentSingle { .. } => "sem_contended_concurrent_single".into(),
                RwRead => "rwlock_uncontended_read".into(),
                RwReadConcurrentMulti => "rwlock_uncontended_read_concurrent_multi".into(),
                RwReadConcurrent => "rwlock_uncontended_read_concurrent".into(),
                RwContendedMulti => "rwlock_contended_read_concurrent_multi".into(),
                RwContended => "rwlock_contended_read_concurrent".into(),
                NotifyOne { waiters } => format!("notify_one_{waiters}"),
                NotifyWaiters { waiters } => format!("notify_waiters_{waiters}"),
                MpscUncontended { chan, recv_many } => {
                    format!("mpsc_uncontended_{}", chan_name(chan, recv_many))
                }
                MpscContended { chan, recv_many } => {
                    format!("mpsc_contended_{}", chan_name(chan, recv_many))
                }
                MpscSend { large: false } => "mpsc_send_medium_1000".into(),
                MpscSend { large: true } => "mpsc_send_large_1000".into(),
            },
            SyncCase::Fibers(n) => format!("fibers_mutex_{n}"),
            SyncCase::Threads(n) => format!("threads_mutex_{n}"),
        }
    }

    pub fn parse(name: &str) -> Option<SyncCase> {
        SyncCase::all().into_iter().find(|c| c.name() == name)
    }

    /// Iterations (tokio cases) or increments (mutex cases) per timed run,
    /// before [`SCALE_ENV`]: sized so that one run takes some 20-200 ms on
    /// a 2-core machine.
    fn base_iters(self) -> usize {
        use TokioCase::*;
        match self {
            SyncCase::Tokio(t) => match t {
                SemUncontended | RwRead => 20_000,
                SemConcurrentMulti { .. } | RwReadConcurrentMulti | RwContendedMulti => 4_000,
                SemConcurrentSingle { .. } | RwReadConcurrent | RwContended => 20_000,
                NotifyOne { .. } | NotifyWaiters { .. } => 10,
                MpscUncontended { .. } => 200,
                MpscContended {
                    chan: Chan::BoundedFull,
                    ..
                } => 30,
                MpscContended { .. } => 100,
                MpscSend { large: false } => 20_000,
                MpscSend { large: true } => 2_000,
            },
            SyncCase::Fibers(1) | SyncCase::Threads(1) => 2_000_000,
            SyncCase::Fibers(_) | SyncCase::Threads(_) => 200_000,
        }
    }

    /// Iterations per timed run.
    pub fn iters(self) -> usize {
        (self.base_iters() / scale()).max(1)
    }

    /// Whether contender `who` takes part.
    fn takes_part(self, who: usize) -> bool {
        match self {
            SyncCase::Tokio(_) => matches!(who, WEFT | TOKIO),
            SyncCase::Fibers(_) => matches!(who, WEFT | MAY),
            SyncCase::Threads(_) => matches!(who, WEFT | PARKING_LOT | STD),
        }
    }
}

/// Iterations of the untimed warm-up before a timed run of `n`.
fn warm_up(n: usize) -> usize {
    (n / 10).max(1)
}

fn scale() -> usize {
    std::env::var(SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&d| d > 0)
        .unwrap_or(1)
}

// ---------------------------------------------------------------- suite ----

/// The `sync` suite.
pub fn suite(_opts: &Options) -> Suite {
    let mut cases = Vec::new();
    let mut checks = Vec::new();
    for c in SyncCase::all() {
        let name = c.name();
        let per = match c {
            SyncCase::Tokio(_) => "iter",
            _ => "incr",
        };
        cases.push(Case::new(
            &name,
            vec![Metric::new("", per, Unit::Ns)],
            move |who, opts| vec![measure(c, who, opts.workers)],
        ));
        match c {
            SyncCase::Tokio(t) if t.contended() => {
                checks.push(Check::new(&name, TOKIO, 1.5).note("contended"))
            }
            SyncCase::Tokio(_) => checks.push(Check::new(&name, TOKIO, 1.0)),
            SyncCase::Fibers(_) => checks.push(Check::new(&name, MAY, 1.0)),
            SyncCase::Threads(_) => {}
        }
    }
    let mut notes = vec![
        "sem_*, rwlock_*, notify_*, mpsc_*: tokio's sync benches, weft (on weft) vs tokio (on \
         tokio), --workers workers, time per iteration of tokio's loop; mpsc_*: weft::chan \
         (weft has no sync::mpsc)"
            .to_string(),
        "fibers_mutex_N: weft fibers (lock_blocking) vs may coroutines (may::sync::Mutex), child \
         process per measurement; threads_mutex_N: weft lock_blocking vs parking_lot vs std; \
         time per increment"
            .to_string(),
    ];
    if scale() != 1 {
        notes.push(format!(
            "{SCALE_ENV}={}: every iteration count divided by it",
            scale()
        ));
    }
    Suite {
        command: "sync",
        contenders: CONTENDERS,
        cases,
        notes,
        baseline: None,
        checks,
    }
}

/// Measures case `c` on contender `who`: ns per iteration or increment, or
/// NaN where it does not take part.
fn measure(c: SyncCase, who: usize, workers: usize) -> f64 {
    if !c.takes_part(who) {
        return f64::NAN;
    }
    let n = c.iters();
    let elapsed = match (c, who) {
        (SyncCase::Tokio(t), WEFT) => weft_side::measure(t, workers, n),
        (SyncCase::Tokio(t), TOKIO) => tokio_side::measure(t, workers, n),
        (SyncCase::Fibers(_), _) => return run_child(c, who, workers),
        (SyncCase::Threads(k), WEFT) => threads::<weft::sync::Mutex<u64>>(k, n),
        (SyncCase::Threads(k), PARKING_LOT) => threads::<parking_lot::Mutex<u64>>(k, n),
        (SyncCase::Threads(k), STD) => threads::<std::sync::Mutex<u64>>(k, n),
        _ => unreachable!("{} takes no part in {}", CONTENDERS[who], c.name()),
    };
    elapsed.as_nanos() as f64 / n as f64
}

/// Runs `f` `warm_up(n)` times untimed, then `n` times timed.
fn timed(n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..warm_up(n) {
        f();
    }
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed()
}

// ------------------------------------------------------ tokio's benches ----

/// tokio's `Medium`: 64 words.
#[derive(Debug, Clone, Copy)]
pub struct Medium(pub [usize; 64]);

/// tokio's `Large`: 64 `Medium`s (32 KiB).
#[derive(Debug, Clone, Copy)]
pub struct Large(pub [Medium; 64]);

impl Default for Medium {
    fn default() -> Self {
        Medium([0; 64])
    }
}

impl Default for Large {
    fn default() -> Self {
        Large([Medium::default(); 64])
    }
}

/// Marks a value, so a check can tell it arrived whole.
trait Stamp: Default + Send + 'static {
    fn stamp(i: usize) -> Self;
    fn read(&self) -> usize;
}

impl Stamp for Medium {
    fn stamp(i: usize) -> Self {
        let mut m = Medium::default();
        m.0[63] = i;
        m
    }
    fn read(&self) -> usize {
        self.0[63]
    }
}

impl Stamp for Large {
    fn stamp(i: usize) -> Self {
        let mut l = Large::default();
        l.0[63].0[63] = i;
        l
    }
    fn read(&self) -> usize {
        self.0[63].0[63]
    }
}

/// tokio's channels behind the names the cases use.
mod tokio_chan {
    use tokio::sync::mpsc;

    pub type Tx<T> = mpsc::Sender<T>;
    pub type Rx<T> = mpsc::Receiver<T>;
    pub type UTx<T> = mpsc::UnboundedSender<T>;
    pub type URx<T> = mpsc::UnboundedReceiver<T>;

    pub fn bounded<T>(cap: usize) -> (Tx<T>, Rx<T>) {
        mpsc::channel(cap)
    }
    pub fn unbounded<T>() -> (UTx<T>, URx<T>) {
        mpsc::unbounded_channel()
    }
    pub async fn send<T>(tx: &Tx<T>, v: T) {
        assert!(tx.send(v).await.is_ok(), "receiver gone");
    }
    pub fn usend<T>(tx: &UTx<T>, v: T) {
        assert!(tx.send(v).is_ok(), "receiver gone");
    }
    pub async fn recv<T>(rx: &mut Rx<T>) -> Option<T> {
        rx.recv().await
    }
    pub async fn urecv<T>(rx: &mut URx<T>) -> Option<T> {
        rx.recv().await
    }
    pub async fn recv_many<T>(rx: &mut Rx<T>, buf: &mut Vec<T>, limit: usize) -> usize {
        rx.recv_many(buf, limit).await
    }
    pub async fn urecv_many<T>(rx: &mut URx<T>, buf: &mut Vec<T>, limit: usize) -> usize {
        rx.recv_many(buf, limit).await
    }
}

/// weft's `chan` behind the names the cases use.
mod weft_chan {
    use weft::chan::{Receiver, Sender};

    pub type Tx<T> = Sender<T>;
    pub type Rx<T> = Receiver<T>;
    pub type UTx<T> = Sender<T>;
    pub type URx<T> = Receiver<T>;

    pub fn bounded<T>(cap: usize) -> (Tx<T>, Rx<T>) {
        weft::chan::bounded(cap)
    }
    pub fn unbounded<T>() -> (UTx<T>, URx<T>) {
        weft::chan::unbounded()
    }
    pub async fn send<T: Send>(tx: &Tx<T>, v: T) {
        assert!(tx.send(v).await.is_ok(), "receiver gone");
    }
    /// An unbounded channel is never full: `try_send` is its plain send.
    pub fn usend<T: Send>(tx: &UTx<T>, v: T) {
        assert!(tx.try_send(v).is_ok(), "receiver gone");
    }
    pub async fn recv<T: Send>(rx: &mut Rx<T>) -> Option<T> {
        rx.recv().await.ok()
    }
    pub async fn urecv<T: Send>(rx: &mut URx<T>) -> Option<T> {
        rx.recv().await.ok()
    }
    /// tokio's `recv_many`: waits for one, then takes what is there, up to
    /// `limit`.
    pub async fn recv_many<T: Send>(rx: &mut Rx<T>, buf: &mut Vec<T>, limit: usize) -> usize {
        let Ok(v) = rx.recv().await else {
            return 0;
        };
        buf.push(v);
        let mut n = 1;
        while n < limit {
            match rx.try_recv() {
                Ok(v) => {
                    buf.push(v);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
    }
    pub async fn urecv_many<T: Send>(rx: &mut URx<T>, buf: &mut Vec<T>, limit: usize) -> usize {
        recv_many(rx, buf, limit).await
    }
}

/// tokio's sync benches, written once for a side: `$R` the runtime adapter,
/// `$sync` the path of its `sync` module, `$chan` its channel names.
macro_rules! tokio_cases {
    ($side:ident, $R:ty, [$($sync:tt)+], $chan:ident) => {
        mod $side {
            use std::hint::black_box;
            use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
            use std::sync::Arc;
            use std::time::Duration;

            use super::$chan as ch;
            use super::{timed, warm_up, Chan, Large, Medium, Stamp, TokioCase};
            use crate::runtimes::{build, Rt, Spawn};

            type Semaphore = $($sync)+::Semaphore;
            type RwLock<T> = $($sync)+::RwLock<T>;
            type Notify = $($sync)+::Notify;
            type R = $R;

            /// Builds the runtime, runs case `t` warm-up then `n` times
            /// timed, checks the result, shuts the runtime down.
            pub fn measure(t: TokioCase, workers: usize, n: usize) -> Duration {
                let rt = build::<R>(workers, true);
                let total = n + warm_up(n);
                let elapsed = match t {
                    TokioCase::SemUncontended => sem_uncontended(&rt, n, total),
                    TokioCase::SemConcurrentMulti { permits } => {
                        sem_concurrent(&rt, n, total, permits, true)
                    }
                    TokioCase::SemConcurrentSingle { permits } => {
                        sem_concurrent(&rt, n, total, permits, false)
                    }
                    TokioCase::RwRead => rw_read(&rt, n, total),
                    TokioCase::RwReadConcurrentMulti => rw_concurrent(&rt, n, total, true),
                    TokioCase::RwReadConcurrent => rw_concurrent(&rt, n, total, false),
                    TokioCase::RwContendedMulti => rw_contended(&rt, n, total, true),
                    TokioCase::RwContended => rw_contended(&rt, n, total, false),
                    TokioCase::NotifyOne { waiters } => notify(&rt, n, waiters, false),
                    TokioCase::NotifyWaiters { waiters } => notify(&rt, n, waiters, true),
                    TokioCase::MpscUncontended { chan, recv_many } => {
                        mpsc_uncontended(&rt, n, chan, recv_many)
                    }
                    TokioCase::MpscContended { chan, recv_many } => {
                        mpsc_contended(&rt, n, chan, recv_many)
                    }
                    TokioCase::MpscSend { large: false } => mpsc_send::<Medium>(&rt, n),
                    TokioCase::MpscSend { large: true } => mpsc_send::<Large>(&rt, n),
                };
                rt.shutdown();
                elapsed
            }

            // ---- sync_semaphore.rs

            /// `uncontended/multi`: 6 acquire/release in one `block_on`.
            fn sem_uncontended(rt: &R, n: usize, total: usize) -> Duration {
                let s = Arc::new(Semaphore::new(10));
                let acquired = Arc::new(AtomicUsize::new(0));
                let elapsed = timed(n, || {
                    let (s, acquired) = (s.clone(), acquired.clone());
                    rt.block_on(async move {
                        for _ in 0..6 {
                            let permit = s.acquire().await;
                            assert!(permit.is_ok(), "acquire failed");
                            acquired.fetch_add(1, Ordering::Relaxed);
                            drop(permit);
                        }
                    })
                });
                assert_eq!(acquired.load(Ordering::Relaxed), 6 * total);
                assert_eq!(s.available_permits(), 10);
                elapsed
            }

            async fn sem_task(s: Arc<Semaphore>, acquired: Arc<AtomicUsize>) {
                let permit = s.acquire().await;
                assert!(permit.is_ok(), "acquire failed");
                acquired.fetch_add(1, Ordering::Relaxed);
                drop(permit);
            }

            /// `*/concurrent_multi` (6 spawned tasks) and
            /// `*/concurrent_single` (6 joined futures) on `permits`
            /// permits (10: uncontended, 5: contended).
            fn sem_concurrent(
                rt: &R,
                n: usize,
                total: usize,
                permits: usize,
                spawn: bool,
            ) -> Duration {
                let s = Arc::new(Semaphore::new(permits));
                let acquired = Arc::new(AtomicUsize::new(0));
                let local = rt.local();
                let elapsed = timed(n, || {
                    let (s, a) = (s.clone(), acquired.clone());
                    let local = local.clone();
                    rt.block_on(async move {
                        if spawn {
                            let j = tokio::join!(
                                local.spawn(sem_task(s.clone(), a.clone())),
                                local.spawn(sem_task(s.clone(), a.clone())),
                                local.spawn(sem_task(s.clone(), a.clone())),
                                local.spawn(sem_task(s.clone(), a.clone())),
                                local.spawn(sem_task(s.clone(), a.clone())),
                                local.spawn(sem_task(s.clone(), a.clone())),
                            );
                            black_box(j);
                        } else {
                            tokio::join!(
                                sem_task(s.clone(), a.clone()),
                                sem_task(s.clone(), a.clone()),
                                sem_task(s.clone(), a.clone()),
                                sem_task(s.clone(), a.clone()),
                                sem_task(s.clone(), a.clone()),
                                sem_task(s.clone(), a.clone()),
                            );
                        }
                    })
                });
                assert_eq!(acquired.load(Ordering::Relaxed), 6 * total);
                assert_eq!(s.available_permits(), permits);
                elapsed
            }

            // ---- sync_rwlock.rs (the value: the writes so far)

            /// `uncontended/read`: 6 reads in one `block_on`.
            fn rw_read(rt: &R, n: usize, total: usize) -> Duration {
                let lock = Arc::new(RwLock::new(0usize));
                let reads = Arc::new(AtomicUsize::new(0));
                let elapsed = timed(n, || {
                    let (lock, reads) = (lock.clone(), reads.clone());
                    rt.block_on(async move {
                        for _ in 0..6 {
                            let read = lock.read().await;
                            assert_eq!(**black_box(&read), 0, "read a value never written");
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                });
                assert_eq!(reads.load(Ordering::Relaxed), 6 * total);
                elapsed
            }

            /// A reader that expects the value `expect`.
            async fn reader(lock: Arc<RwLock<usize>>, reads: Arc<AtomicUsize>, expect: usize) {
                let read = lock.read().await;
                assert_eq!(**black_box(&read), expect, "a read missed a write");
                reads.fetch_add(1, Ordering::Relaxed);
            }

            /// `uncontended/read_concurrent_multi` (6 spawned readers) and
            /// `uncontended/read_concurrent` (6 joined readers).
            fn rw_concurrent(rt: &R, n: usize, total: usize, spawn: bool) -> Duration {
                let lock = Arc::new(RwLock::new(0usize));
                let reads = Arc::new(AtomicUsize::new(0));
                let local = rt.local();
                let elapsed = timed(n, || {
                    let (l, r) = (lock.clone(), reads.clone());
                    let local = local.clone();
                    rt.block_on(async move {
                        if spawn {
                            let j = tokio::join!(
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                                local.spawn(reader(l.clone(), r.clone(), 0)),
                            );
                            black_box(j);
                        } else {
                            tokio::join!(
                                reader(l.clone(), r.clone(), 0),
                                reader(l.clone(), r.clone(), 0),
                                reader(l.clone(), r.clone(), 0),
                                reader(l.clone(), r.clone(), 0),
                                reader(l.clone(), r.clone(), 0),
                                reader(l.clone(), r.clone(), 0),
                            );
                        }
                    })
                });
                assert_eq!(reads.load(Ordering::Relaxed), 6 * total);
                elapsed
            }

            /// `contention/read_concurrent_multi` (5 spawned readers) and
            /// `contention/read_concurrent` (5 joined readers): the write
            /// lock is held (and the value bumped) when the readers start,
            /// and dropped beside them; each reader must see the bump.
            fn rw_contended(rt: &R, n: usize, total: usize, spawn: bool) -> Duration {
                let lock = Arc::new(RwLock::new(0usize));
                let reads = Arc::new(AtomicUsize::new(0));
                let local = rt.local();
                let elapsed = timed(n, || {
                    let (l, r) = (lock.clone(), reads.clone());
                    let local = local.clone();
                    rt.block_on(async move {
                        let mut write = l.write().await;
                        *write += 1;
                        let v = *write;
                        if spawn {
                            let j = tokio::join!(
                                async move { drop(write) },
                                local.spawn(reader(l.clone(), r.clone(), v)),
                                local.spawn(reader(l.clone(), r.clone(), v)),
                                local.spawn(reader(l.clone(), r.clone(), v)),
                                local.spawn(reader(l.clone(), r.clone(), v)),
                                local.spawn(reader(l.clone(), r.clone(), v)),
                            );
                            black_box(j);
                        } else {
                            tokio::join!(
                                async move { drop(write) },
                                reader(l.clone(), r.clone(), v),
                                reader(l.clone(), r.clone(), v),
                                reader(l.clone(), r.clone(), v),
                                reader(l.clone(), r.clone(), v),
                                reader(l.clone(), r.clone(), v),
                            );
                        }
                    })
                });
                assert_eq!(reads.load(Ordering::Relaxed), 5 * total);
                assert_eq!(lock.try_read().map(|g| *g).ok(), Some(total));
                elapsed
            }

            // ---- sync_notify.rs

            /// `notify_one/N` and `notify_waiters/N`: `waiters` tasks count
            /// the notifications they get; an iteration resets the count
            /// and notifies from this thread until it reaches 500. After
            /// the timed run the waiters are stopped and must all exit.
            fn notify(rt: &R, n: usize, waiters: usize, all: bool) -> Duration {
                const N_ITERS: usize = 500;
                let notify = Arc::new(Notify::new());
                let counter = Arc::new(AtomicUsize::new(0));
                let stop = Arc::new(AtomicBool::new(false));
                let exited = Arc::new(AtomicUsize::new(0));
                for _ in 0..waiters {
                    let (notify, counter) = (notify.clone(), counter.clone());
                    let (stop, exited) = (stop.clone(), exited.clone());
                    rt.spawn_detached(async move {
                        loop {
                            notify.notified().await;
                            if stop.load(Ordering::Acquire) {
                                exited.fetch_add(1, Ordering::Release);
                                return;
                            }
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                let elapsed = timed(n, || {
                    counter.store(0, Ordering::Relaxed);
                    loop {
                        if all {
                            notify.notify_waiters();
                        } else {
                            notify.notify_one();
                        }
                        if counter.load(Ordering::Relaxed) >= N_ITERS {
                            break;
                        }
                    }
                });
                stop.store(true, Ordering::Release);
                while exited.load(Ordering::Acquire) < waiters {
                    notify.notify_waiters();
                    notify.notify_one();
                    std::thread::yield_now();
                }
                elapsed
            }

            // ---- sync_mpsc.rs

            const N_SEND: usize = 5_000;
            /// Sum of what one contended iteration receives: 5 x 0..1000.
            const CONTENDED_SUM: usize = 5 * (999 * 1000 / 2);

            /// `uncontented/*`: one `block_on` sends 5,000, then receives
            /// them (`recv` or `recv_many`); checks the sum.
            fn mpsc_uncontended(rt: &R, n: usize, chan: Chan, recv_many: bool) -> Duration {
                let expect = N_SEND * (N_SEND - 1) / 2;
                timed(n, || {
                    let sum = rt.block_on(async move {
                        let mut sum = 0;
                        let mut buffer = Vec::<usize>::with_capacity(N_SEND);
                        let mut total = 0;
                        if chan == Chan::Unbounded {
                            let (tx, mut rx) = ch::unbounded::<usize>();
                            for i in 0..N_SEND {
                                ch::usend(&tx, i);
                            }
                            if recv_many {
                                while total < N_SEND {
                                    total += ch::urecv_many(&mut rx, &mut buffer, N_SEND).await;
                                }
                            } else {
                                for _ in 0..N_SEND {
                                    sum += ch::urecv(&mut rx).await.expect("sender gone");
                                }
                            }
                        } else {
                            let (tx, mut rx) = ch::bounded::<usize>(1_000_000);
                            for i in 0..N_SEND {
                                ch::send(&tx, i).await;
                            }
                            if recv_many {
                                while total < N_SEND {
                                    total += ch::recv_many(&mut rx, &mut buffer, N_SEND).await;
                                }
                            } else {
                                for _ in 0..N_SEND {
                                    sum += ch::recv(&mut rx).await.expect("sender gone");
                                }
                            }
                        }
                        sum + buffer.iter().sum::<usize>()
                    });
                    assert_eq!(sum, expect, "messages lost or changed");
                })
            }

            /// `contention/*`: 5 spawned senders send 0..1000 each, the
            /// `block_on` receives 5,000 (`recv` or `recv_many`); checks
            /// the sum.
            fn mpsc_contended(rt: &R, n: usize, chan: Chan, recv_many: bool) -> Duration {
                let local = rt.local();
                timed(n, || {
                    let local = local.clone();
                    let sum = rt.block_on(async move {
                        let mut sum = 0;
                        let mut buffer = Vec::<usize>::with_capacity(N_SEND);
                        let mut total = 0;
                        if chan == Chan::Unbounded {
                            let (tx, mut rx) = ch::unbounded::<usize>();
                            for _ in 0..5 {
                                let tx = tx.clone();
                                local.spawn_detached(async move {
                                    for i in 0..1000 {
                                        ch::usend(&tx, i);
                                    }
                                });
                            }
                            if recv_many {
                                while total < N_SEND {
                                    total += ch::urecv_many(&mut rx, &mut buffer, N_SEND).await;
                                }
                            } else {
                                for _ in 0..N_SEND {
                                    sum += ch::urecv(&mut rx).await.expect("senders gone");
                                }
                            }
                        } else {
                            let cap = if chan == Chan::Bounded { 1_000_000 } else { 100 };
                            let (tx, mut rx) = ch::bounded::<usize>(cap);
                            for _ in 0..5 {
                                let tx = tx.clone();
                                local.spawn_detached(async move {
                                    for i in 0..1000 {
                                        ch::send(&tx, i).await;
                                    }
                                });
                            }
                            if recv_many {
                                while total < N_SEND {
                                    total += ch::recv_many(&mut rx, &mut buffer, N_SEND).await;
                                }
                            } else {
                                for _ in 0..N_SEND {
                                    sum += ch::recv(&mut rx).await.expect("senders gone");
                                }
                            }
                        }
                        sum + buffer.iter().sum::<usize>()
                    });
                    assert_eq!(sum, CONTENDED_SUM, "messages lost or changed");
                })
            }

            /// `send/medium_1000`, `send/large_1000`: a fresh
            /// `channel(1000)`, `block_on(send)`, `block_on(recv)`.
            fn mpsc_send<T: Stamp>(rt: &R, n: usize) -> Duration {
                let mut i = 0;
                timed(n, || {
                    i += 1;
                    let (tx, mut rx) = ch::bounded::<T>(1000);
                    rt.block_on(ch::send(&tx, T::stamp(i)));
                    let v = rt.block_on(ch::recv(&mut rx)).expect("sender gone");
                    assert_eq!(black_box(&v).read(), i, "message changed");
                })
            }
        }
    };
}

tokio_cases!(weft_side, crate::runtimes::Weft, [weft::sync], weft_chan);
tokio_cases!(
    tokio_side,
    crate::runtimes::Tokio,
    [tokio::sync],
    tokio_chan
);

// -------------------------------------------------------------- mutexes ----

/// A mutex over a counter, locked from a plain thread, a weft fiber or a
/// may coroutine.
pub trait CounterLock: Send + Sync + 'static {
    fn new() -> Self;
    fn incr(&self);
    fn get(&self) -> u64;
}

impl CounterLock for weft::sync::Mutex<u64> {
    fn new() -> Self {
        weft::sync::Mutex::new(0)
    }
    fn incr(&self) {
        *self.lock_blocking() += 1;
    }
    fn get(&self) -> u64 {
        *self.lock_blocking()
    }
}

impl CounterLock for parking_lot::Mutex<u64> {
    fn new() -> Self {
        parking_lot::Mutex::new(0)
    }
    fn incr(&self) {
        *self.lock() += 1;
    }
    fn get(&self) -> u64 {
        *self.lock()
    }
}

impl CounterLock for std::sync::Mutex<u64> {
    fn new() -> Self {
        std::sync::Mutex::new(0)
    }
    fn incr(&self) {
        *self.lock().expect("poisoned") += 1;
    }
    fn get(&self) -> u64 {
        *self.lock().expect("poisoned")
    }
}

impl CounterLock for may::sync::Mutex<u64> {
    fn new() -> Self {
        may::sync::Mutex::new(0)
    }
    fn incr(&self) {
        *self.lock().expect("poisoned") += 1;
    }
    fn get(&self) -> u64 {
        *self.lock().expect("poisoned")
    }
}

/// How the actors of a mutex case run: each of `k` runs `job` to the end.
trait Actors {
    fn run(k: usize, job: Arc<dyn Fn() + Send + Sync>);
    /// Whether the actors wait at a start line until all have started
    /// (threads: spawning one takes long enough that the first would run
    /// alone). Fibers and coroutines start in microseconds and do not:
    /// may coroutines spinning there on `yield_now` starved the ones not yet
    /// started (a hang).
    const GATE: bool;
}

struct Threads;
impl Actors for Threads {
    fn run(k: usize, job: Arc<dyn Fn() + Send + Sync>) {
        let hs: Vec<_> = (0..k)
            .map(|_| {
                let job = job.clone();
                std::thread::spawn(move || job())
            })
            .collect();
        for h in hs {
            h.join().expect("thread panicked");
        }
    }
    const GATE: bool = true;
}

struct WeftFibers;
impl Actors for WeftFibers {
    fn run(k: usize, job: Arc<dyn Fn() + Send + Sync>) {
        let hs: Vec<_> = (0..k)
            .map(|_| {
                let job = job.clone();
                weft::fiber::spawn(move || job())
            })
            .collect();
        for h in hs {
            h.join().expect("weft fiber failed");
        }
    }
    const GATE: bool = false;
}

struct MayCoroutines;
impl Actors for MayCoroutines {
    fn run(k: usize, job: Arc<dyn Fn() + Send + Sync>) {
        let hs: Vec<_> = (0..k)
            .map(|_| {
                let job = job.clone();
                // SAFETY: the job keeps no thread-local across a suspension
                // and uses far less than a coroutine's stack.
                unsafe { may::coroutine::spawn(move || job()) }
            })
            .collect();
        for h in hs {
            h.join().expect("may coroutine failed");
        }
    }
    const GATE: bool = false;
}

/// `k` actors run by `A` increment one counter under `L`, `n / k` times
/// each; returns the time, after checking the counter. Untimed first with a
/// tenth of the increments.
fn mutex_case<L: CounterLock, A: Actors>(k: usize, n: usize) -> Duration {
    let run = |n: usize| -> Duration {
        let per = n / k;
        let lock = Arc::new(L::new());
        // Threads start together: the last to arrive releases the others.
        let arrived = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let job: Arc<dyn Fn() + Send + Sync> = {
            let (lock, arrived, go) = (lock.clone(), arrived.clone(), go.clone());
            Arc::new(move || {
                if A::GATE {
                    if arrived.fetch_add(1, Ordering::AcqRel) + 1 == k {
                        go.store(true, Ordering::Release);
                    }
                    while !go.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                }
                for _ in 0..per {
                    lock.incr();
                }
            })
        };
        let start = Instant::now();
        A::run(k, job);
        let elapsed = start.elapsed();
        assert_eq!(lock.get(), (per * k) as u64, "the counter is off");
        elapsed
    };
    run(warm_up(n));
    run(n)
}

/// `threads_mutex_k` on `L`: the per-increment figure's total time.
fn threads<L: CounterLock>(k: usize, n: usize) -> Duration {
    mutex_case::<L, Threads>(k, n)
}

/// Runs `fibers_mutex_*` case `c` for contender `who` (weft or may) with
/// `workers` worker threads in a child process; returns ns per increment.
fn run_child(c: SyncCase, who: usize, workers: usize) -> f64 {
    crate::child::run(
        CHILD_ARG,
        RESULT_PREFIX,
        &c.name(),
        CONTENDERS[who],
        workers,
    )
}

/// The child process: `CHILD_ARG <case> <weft|may> <workers>`. Prints
/// `SYNC-RESULT <ns per increment>` and exits 0, or exits 2 on bad
/// arguments (a failed check panics: non-zero exit).
pub fn child_main(args: &[String]) -> ExitCode {
    crate::child::die_with_parent();
    let [case, who, workers] = args else {
        eprintln!("usage: weft-bench {CHILD_ARG} <case> <weft|may> <workers>");
        return ExitCode::from(2);
    };
    let Some(SyncCase::Fibers(k)) = SyncCase::parse(case) else {
        eprintln!("{CHILD_ARG}: unknown fibers case '{case}'");
        return ExitCode::from(2);
    };
    let Ok(workers) = workers.parse::<usize>() else {
        eprintln!("{CHILD_ARG}: bad worker count '{workers}'");
        return ExitCode::from(2);
    };
    let n = SyncCase::Fibers(k).iters();
    let elapsed = match who.as_str() {
        "weft" => {
            let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
            let elapsed = mutex_case::<weft::sync::Mutex<u64>, WeftFibers>(k, n);
            drop(rt);
            elapsed
        }
        "may" => {
            // Before may's first use: it reads its configuration once.
            may::config().set_workers(workers);
            mutex_case::<may::sync::Mutex<u64>, MayCoroutines>(k, n)
        }
        _ => {
            eprintln!("{CHILD_ARG}: unknown contender '{who}'");
            return ExitCode::from(2);
        }
    };
    let ns = elapsed.as_nanos() as f64 / n as f64;
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
        let all = SyncCase::all();
        let mut names: Vec<String> = all.iter().map(|c| c.name()).collect();
        for (c, name) in all.iter().zip(&names) {
            assert_eq!(SyncCase::parse(name), Some(*c));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn suite_checks_every_tokio_and_fiber_case() {
        let s = suite(&Options::for_tests());
        assert_eq!(s.command, "sync");
        for check in &s.checks {
            assert!(s.cases.iter().any(|c| c.name == check.case));
        }
        let tokio = SyncCase::all()
            .into_iter()
            .filter(|c| matches!(c, SyncCase::Tokio(_)))
            .count();
        assert_eq!(s.checks.iter().filter(|c| c.vs == TOKIO).count(), tokio);
        let contended = s.checks.iter().filter(|c| c.factor == 1.5).count();
        assert_eq!(contended, 4 + 6);
        assert_eq!(s.checks.iter().filter(|c| c.vs == MAY).count(), 3);
    }

    /// Every tokio case, tiny, on both sides; the mutex cases on threads
    /// and on both fiber runtimes in-process.
    #[test]
    fn every_contender_runs_every_case() {
        let _may = crate::child::may_in_process();
        for c in SyncCase::all() {
            match c {
                // In a debug build a 32 KiB message overflows the test thread's 2 MiB
                // stack on weft's side (its send future holds the value and the wait
                // node's hand-over slot, and every unoptimized frame on the way copies
                // it; tokio's side does not). The release benchmark runs the case.
                SyncCase::Tokio(TokioCase::MpscSend { large: true }) if cfg!(debug_assertions) => {}
                SyncCase::Tokio(t) => {
                    let n = match t {
                        TokioCase::NotifyOne { .. } | TokioCase::NotifyWaiters { .. } => 2,
                        TokioCase::MpscUncontended { .. } | TokioCase::MpscContended { .. } => 2,
                        _ => 20,
                    };
                    weft_side::measure(t, 2, n);
                    tokio_side::measure(t, 2, n);
                }
                SyncCase::Threads(k) => {
                    threads::<weft::sync::Mutex<u64>>(k, 4_000);
                    threads::<parking_lot::Mutex<u64>>(k, 4_000);
                    threads::<std::sync::Mutex<u64>>(k, 4_000);
                }
                SyncCase::Fibers(k) => {
                    let rt = Weft::with_pools(2, 0).expect("cannot build weft");
                    mutex_case::<weft::sync::Mutex<u64>, WeftFibers>(k, 4_000);
                    drop(rt);
                    mutex_case::<may::sync::Mutex<u64>, MayCoroutines>(k, 4_000);
                }
            }
        }
    }
}
