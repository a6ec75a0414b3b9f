//! The `chan` suite: weft's channels (`weft::chan`) against the Rust
//! channels people use, on the cases of crossbeam-channel's own benchmark
//! suite ([`chan_shapes`](crate::chan_shapes): `seq`, `spsc`, `mpsc`,
//! `mpmc`, `select_rx`, `select_both` on `bounded0`, `bounded1`, `bounded`
//! (room for every message) and `unbounded`), run three ways, each with its
//! own peers:
//!
//! * `threads_*`: plain threads with blocking calls; weft's `send_blocking`
//!   / `recv_blocking` / `Select::select` against crossbeam-channel, flume,
//!   kanal and `std::sync::mpsc`. In-process; no runtime is alive.
//! * `tasks_*`: async tasks on a runtime with `--workers` workers (weft
//!   without its interactive pool); weft's `send(v).await` / `recv().await`
//!   / `Select::select_async` on weft against tokio's `mpsc`,
//!   async-channel, flume's and kanal's async sides, each on tokio. A fresh
//!   runtime per measurement.
//! * `fibers_*`: weft fibers using weft's blocking calls (which suspend the
//!   fiber) against may coroutines using may's `mpsc` (`mpmc` for the `mpmc`
//!   shape, its cqueue select for `select_rx`), both with `--workers`
//!   worker threads. may has no bounded channel: its channel is unbounded in
//!   every flavour. As in the `fiber` suite, every measurement runs in a
//!   fresh child process (may keeps one scheduler per process).
//!
//! The contenders are the union of the three ways' peers; a peer that does
//! not take part in a case (another way's, or one lacking the flavour,
//! several receivers per channel, or a select) shows `-`. One measurement
//! runs the case once untimed with a tenth of the messages (warm-up), then
//! times it; the figure is the time per message.
//!
//! `alloc_spsc` counts heap allocations (a counting global allocator) while
//! 10,000 messages go from one thread to another (after 1,000 untimed
//! ones), for each thread peer and flavour: the target for weft is
//! zero on the bounded flavours.
//!
//! For a smoke test, `WEFT_BENCH_CHAN_SCALE=N` divides every message count
//! by N.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::alloc_count;
use crate::chan_peers::{
    AsyncChannel, BlockingChan, Crossbeam, Flume, FlumeAsync, Kanal, KanalAsync, MayMpmc, MayMpsc,
    Msg, Std, TokioMpsc,
};
use crate::chan_shapes::{
    blocking_supports, run_async, run_blocking, stamped, Actors, Flavour, Job, Report, Shape,
    Threads, ACTORS,
};
use crate::chan_weft::{WeftAsync, WeftChan};
use crate::harness::{Case, Check, Metric, Options, Suite, Target, Unit};
use crate::runtimes::{build, Rt, Tokio, Weft};

/// Contenders, in the index order the cases use: weft, then the thread
/// peers, the async peers (flume and kanal stand for their async sides in
/// the `tasks_*` cases) and may.
pub const CONTENDERS: &[&str] = &[
    "weft",
    "crossbeam",
    "flume",
    "kanal",
    "std",
    "tokio",
    "async-channel",
    "may",
];
const WEFT: usize = 0;
const CROSSBEAM: usize = 1;
const FLUME: usize = 2;
const KANAL: usize = 3;
const STD: usize = 4;
const TOKIO: usize = 5;
const ASYNC_CHANNEL: usize = 6;
const MAY: usize = 7;

/// The hidden first argument that makes this binary run one `fibers_*`
/// measurement as a child process (see [`child_main`]).
pub const CHILD_ARG: &str = "__chan-child";
/// The child's result line starts with this, followed by ns per message.
const RESULT_PREFIX: &str = "CHAN-RESULT";
/// Divides every message count, for smoke tests.
const SCALE_ENV: &str = "WEFT_BENCH_CHAN_SCALE";

/// Messages per `alloc_spsc` window, and untimed ones before it.
const ALLOC_MSGS: usize = 10_000;
const ALLOC_WARM: usize = 1_000;

/// What `chan --help` prints above the options.
pub const HELP: &str = "\
The cases of crossbeam-channel's benchmark suite: seq (one actor sends n, then receives n;
bounded and unbounded only), spsc, mpsc (4 senders, 1 receiver), mpmc (4 + 4), select_rx
(4 channels, a sender on each, 1 receiver selecting), select_both (4 channels; 4 senders and 4
receivers, each selecting over all 4 for every message), on bounded0 (rendezvous), bounded1,
bounded (room for all n) and unbounded. Every actor is spawned; time per message.
threads_*: plain threads; weft send_blocking/recv_blocking/Select vs crossbeam-channel, flume,
  kanal, std::sync::mpsc. Target: weft at least as fast as crossbeam on every case.
tasks_*: async tasks, --workers workers; weft send().await/recv().await/select_async on weft vs
  tokio::sync::mpsc, async-channel, flume and kanal async, each on tokio (selects of the peers:
  tokio::select!). Target: weft at least 1.5x tokio's mpsc.
fibers_*: weft fibers (blocking calls suspend the fiber) vs may coroutines with may::sync::mpsc
  (mpmc: may::sync::mpmc; select_rx: may's cqueue, as its select!), --workers workers, each
  measurement in a fresh child process; may has no bounded channel (unbounded in every flavour).
  Target: weft at least 2x may on bounded and unbounded, at least as fast on bounded0/bounded1.
'-': the peer does not take part (another way's peer, or it lacks the flavour, several
  receivers per channel, or a select: std, tokio: one receiver; tokio, async-channel: no
  capacity 0; flume async: no bounded0, it hung here (flume's async rendezvous deadlock);
  kanal, std: no select; flume on threads: no select_both, its Selector over sends
  completed unreported sends and hung on bounded; may: no select_both, its sends never
  block and its mpmc wakes only one waiting receiver when it closes).
alloc_spsc: heap allocations per 10,000 messages, thread to thread (counting allocator, each
  thread counting its own), per flavour; 3 rounds. Target: 0 for weft on the bounded flavours.
  A count that stays put as the window grows (a buffer grown by doubling, a first park) is
  not per message: 10,000 would be one per message.
WEFT_BENCH_CHAN_SCALE=N divides every message count by N (smoke tests).";

/// How a case runs its actors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Threads,
    Tasks,
    Fibers,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Threads, Mode::Tasks, Mode::Fibers];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Threads => "threads",
            Mode::Tasks => "tasks",
            Mode::Fibers => "fibers",
        }
    }
}

/// One case: a way, a flavour and a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChanCase {
    pub mode: Mode,
    pub flavour: Flavour,
    pub shape: Shape,
}

impl ChanCase {
    /// Every case, in the order they run.
    pub fn all() -> Vec<ChanCase> {
        let mut cases = Vec::new();
        for mode in Mode::ALL {
            for flavour in Flavour::ALL {
                for shape in flavour.shapes() {
                    cases.push(ChanCase {
                        mode,
                        flavour,
                        shape,
                    });
                }
            }
        }
        cases
    }

    /// `<way>_<flavour>_<shape>`, e.g. `threads_bounded0_spsc`.
    pub fn name(self) -> String {
        format!(
            "{}_{}_{}",
            self.mode.name(),
            self.flavour.name(),
            self.shape.name()
        )
    }

    pub fn parse(name: &str) -> Option<ChanCase> {
        ChanCase::all().into_iter().find(|c| c.name() == name)
    }

    /// Messages per timed run (before [`SCALE_ENV`]), the same for every
    /// contender: sized so that one run takes some 5-300 ms on a 2-core
    /// machine and the whole suite some three minutes. Where a thread must
    /// be woken for most messages (`bounded0`, `bounded1` on threads), a
    /// message costs 0.4-60 µs there, against 10-200 ns where the channel
    /// buffers; may's select costs 13-45 µs a message (it starts a
    /// coroutine per arm), weft's fibers 1-16 µs on `bounded0` / `bounded1`.
    fn base_messages(self) -> usize {
        use Flavour::{Bounded0, Bounded1};
        use Shape::{Mpsc, SelectBoth, SelectRx, Spsc};
        match (self.mode, self.flavour, self.shape) {
            (Mode::Threads, Bounded0, Spsc | Mpsc | SelectBoth) => 6_000,
            (Mode::Threads, Bounded0, _) => 8_000,
            (Mode::Threads, Bounded1, Spsc | Mpsc) => 6_000,
            (Mode::Threads, Bounded1, _) => 16_000,
            (Mode::Tasks, Bounded0 | Bounded1, _) => 100_000,
            (Mode::Fibers, _, SelectRx) => 8_000,
            (Mode::Fibers, Bounded0 | Bounded1, _) => 40_000,
            (_, _, SelectRx | SelectBoth) => 200_000,
            _ => 400_000,
        }
    }

    /// Messages per timed run: a multiple of [`ACTORS`].
    pub fn messages(self) -> usize {
        round(self.base_messages() / scale())
    }
}

/// `n` rounded down to a multiple of [`ACTORS`], at least [`ACTORS`].
fn round(n: usize) -> usize {
    (n / ACTORS * ACTORS).max(ACTORS)
}

/// Messages of the untimed warm-up run before a timed run of `n`.
fn warm_up(n: usize) -> usize {
    round(n / 10)
}

fn scale() -> usize {
    std::env::var(SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&d| d > 0)
        .unwrap_or(1)
}

// ---------------------------------------------------------------- suite ----

/// The `chan` suite.
pub fn suite(_opts: &Options) -> Suite {
    let mut cases = Vec::new();
    let mut checks = Vec::new();
    for c in ChanCase::all() {
        let name = c.name();
        cases.push(Case::new(
            &name,
            vec![Metric::new("", "msg", Unit::Ns)],
            move |who, opts| vec![measure(c, who, opts.workers)],
        ));
        match c.mode {
            Mode::Threads => checks.push(Check::new(&name, CROSSBEAM, 1.0)),
            Mode::Tasks if takes_part(c, TOKIO) => checks.push(Check::new(&name, TOKIO, 1.5)),
            Mode::Fibers if takes_part(c, MAY) => checks.push(if c.flavour.buffers() {
                Check::new(&name, MAY, 2.0)
            } else {
                Check::new(&name, MAY, 1.0).note("may: unbounded, no hand-off")
            }),
            _ => {}
        }
    }
    let flavours: Vec<Metric> = Flavour::ALL
        .iter()
        .map(|f| {
            let m = Metric::new(f.name(), "10k msgs", Unit::Count);
            if *f == Flavour::Unbounded {
                m
            } else {
                m.target(Target::AtMost(0.0))
            }
        })
        .collect();
    // Counts vary little from round to round; a round costs seconds (std
    // and flume wake a thread for most messages on bounded0 / bounded1).
    cases.push(Case::new("alloc_spsc", flavours, |who, _| alloc_spsc(who)).rounds(3));

    let mut notes = vec![
        "threads_*: weft vs crossbeam, flume, kanal, std; tasks_*: weft (on weft) vs tokio, \
         async-channel, flume, kanal (async, on tokio); fibers_*: weft vs may (child process \
         per measurement); '-': not in this way, or the peer lacks the flavour / mpmc / select"
            .to_string(),
        format!(
            "{ACTORS} senders / receivers in mpsc, mpmc, select_*; tasks and fibers on --workers \
             worker threads; selects of the async peers: tokio::select!; may: unbounded in every \
             flavour"
        ),
        "alloc_spsc: allocations per 10k messages thread to thread (counting global allocator)"
            .to_string(),
    ];
    if scale() != 1 {
        notes.push(format!(
            "{SCALE_ENV}={}: every message count divided by it",
            scale()
        ));
    }
    Suite {
        command: "chan",
        contenders: CONTENDERS,
        cases,
        notes,
        baseline: None,
        checks,
    }
}

/// Whether contender `who` takes part in case `c`.
fn takes_part(c: ChanCase, who: usize) -> bool {
    let (shape, flavour) = (c.shape, c.flavour);
    match (c.mode, who) {
        (Mode::Threads, WEFT) => blocking_supports::<WeftChan>(shape, flavour),
        (Mode::Threads, CROSSBEAM) => blocking_supports::<Crossbeam>(shape, flavour),
        (Mode::Threads, FLUME) => blocking_supports::<Flume>(shape, flavour),
        (Mode::Threads, KANAL) => blocking_supports::<Kanal>(shape, flavour),
        (Mode::Threads, STD) => blocking_supports::<Std>(shape, flavour),
        (Mode::Tasks, WEFT) => crate::chan_shapes::async_supports::<WeftAsync>(shape, flavour),
        (Mode::Tasks, TOKIO) => crate::chan_shapes::async_supports::<TokioMpsc>(shape, flavour),
        (Mode::Tasks, ASYNC_CHANNEL) => {
            crate::chan_shapes::async_supports::<AsyncChannel>(shape, flavour)
        }
        (Mode::Tasks, FLUME) => crate::chan_shapes::async_supports::<FlumeAsync>(shape, flavour),
        (Mode::Tasks, KANAL) => crate::chan_shapes::async_supports::<KanalAsync>(shape, flavour),
        (Mode::Fibers, WEFT) => blocking_supports::<WeftChan>(shape, flavour),
        (Mode::Fibers, MAY) if shape == Shape::Mpmc => blocking_supports::<MayMpmc>(shape, flavour),
        (Mode::Fibers, MAY) => blocking_supports::<MayMpsc>(shape, flavour),
        _ => false,
    }
}

/// Measures case `c` on contender `who`: ns per message, or NaN where it
/// does not take part.
fn measure(c: ChanCase, who: usize, workers: usize) -> f64 {
    if !takes_part(c, who) {
        return f64::NAN;
    }
    let n = c.messages();
    let elapsed = match (c.mode, who) {
        (Mode::Threads, WEFT) => threads::<WeftChan>(c, n),
        (Mode::Threads, CROSSBEAM) => threads::<Crossbeam>(c, n),
        (Mode::Threads, FLUME) => threads::<Flume>(c, n),
        (Mode::Threads, KANAL) => threads::<Kanal>(c, n),
        (Mode::Threads, STD) => threads::<Std>(c, n),
        (Mode::Tasks, WEFT) => tasks::<WeftAsync, Weft>(c, n, workers),
        (Mode::Tasks, TOKIO) => tasks::<TokioMpsc, Tokio>(c, n, workers),
        (Mode::Tasks, ASYNC_CHANNEL) => tasks::<AsyncChannel, Tokio>(c, n, workers),
        (Mode::Tasks, FLUME) => tasks::<FlumeAsync, Tokio>(c, n, workers),
        (Mode::Tasks, KANAL) => tasks::<KanalAsync, Tokio>(c, n, workers),
        (Mode::Fibers, WEFT | MAY) => return run_child(c, who, workers),
        _ => unreachable!("{} takes no part in {}", CONTENDERS[who], c.name()),
    };
    elapsed.as_nanos() as f64 / n as f64
}

/// Warm-up, then a timed run of `n` messages, on threads.
fn threads<B: BlockingChan>(c: ChanCase, n: usize) -> Duration {
    run_blocking::<B, Threads>(c.shape, c.flavour, warm_up(n));
    run_blocking::<B, Threads>(c.shape, c.flavour, n).expect("case checked above")
}

/// A fresh runtime `R` with `workers` workers (weft: no interactive pool),
/// warm-up, then a timed run of `n` messages in tasks.
fn tasks<C: crate::chan_peers::AsyncChan, R: Rt>(
    c: ChanCase,
    n: usize,
    workers: usize,
) -> Duration {
    let rt = build::<R>(workers, true);
    run_async::<C, R>(&rt, c.shape, c.flavour, warm_up(n));
    let elapsed = run_async::<C, R>(&rt, c.shape, c.flavour, n).expect("case checked above");
    rt.shutdown();
    elapsed
}

// -------------------------------------------------------------- fibers ----

/// weft fibers, spawned from the measuring thread (not a worker).
pub struct WeftFibers;

impl Actors for WeftFibers {
    fn run(jobs: Vec<Job>) -> Vec<Report> {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|job| weft::fiber::spawn(move || stamped(job)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("weft fiber failed"))
            .collect()
    }
}

/// may coroutines, spawned from the measuring thread.
pub struct MayCoroutines;

impl Actors for MayCoroutines {
    fn run(jobs: Vec<Job>) -> Vec<Report> {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|job| {
                // may's spawn is unsafe because a coroutine may move between
                // threads while it holds a thread-local's address, and
                // because a stack overflow is not caught.
                // SAFETY: the benchmark's coroutines keep no thread-local
                // across a suspension and use far less than their stack.
                unsafe { may::coroutine::spawn(move || stamped(job)) }
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("may coroutine failed"))
            .collect()
    }
}

/// Runs fibers case `c` for contender `who` (weft or may) with `workers`
/// worker threads in a child process; returns ns per message.
fn run_child(c: ChanCase, who: usize, workers: usize) -> f64 {
    crate::child::run(
        CHILD_ARG,
        RESULT_PREFIX,
        &c.name(),
        CONTENDERS[who],
        workers,
    )
}

/// The child process: `CHILD_ARG <case> <weft|may> <workers>`. Prints
/// `CHAN-RESULT <ns per message>` and exits 0, or exits 2 on bad
/// arguments.
pub fn child_main(args: &[String]) -> ExitCode {
    crate::child::die_with_parent();
    let [case, who, workers] = args else {
        eprintln!("usage: weft-bench {CHILD_ARG} <case> <weft|may> <workers>");
        return ExitCode::from(2);
    };
    let Some(c) = ChanCase::parse(case).filter(|c| c.mode == Mode::Fibers) else {
        eprintln!("{CHILD_ARG}: unknown fibers case '{case}'");
        return ExitCode::from(2);
    };
    let Ok(workers) = workers.parse::<usize>() else {
        eprintln!("{CHILD_ARG}: bad worker count '{workers}'");
        return ExitCode::from(2);
    };
    let n = c.messages();
    let elapsed = match who.as_str() {
        "weft" => {
            let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
            let elapsed = fibers::<WeftChan, WeftFibers>(c, n);
            drop(rt);
            elapsed
        }
        "may" => {
            // Before may's first use: it reads its configuration once, when
            // its scheduler starts.
            may::config().set_workers(workers);
            if c.shape == Shape::Mpmc {
                fibers::<MayMpmc, MayCoroutines>(c, n)
            } else {
                fibers::<MayMpsc, MayCoroutines>(c, n)
            }
        }
        _ => {
            eprintln!("{CHILD_ARG}: unknown contender '{who}'");
            return ExitCode::from(2);
        }
    };
    let ns = elapsed.map_or(f64::NAN, |e| e.as_nanos() as f64 / n as f64);
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{RESULT_PREFIX} {ns:?}");
    let _ = stdout.flush();
    ExitCode::SUCCESS
}

/// Warm-up, then a timed run of `n` messages, the actors run by `A`.
fn fibers<B: BlockingChan, A: Actors>(c: ChanCase, n: usize) -> Option<Duration> {
    run_blocking::<B, A>(c.shape, c.flavour, warm_up(n))?;
    run_blocking::<B, A>(c.shape, c.flavour, n)
}

// ---------------------------------------------------------- allocations ----

/// `alloc_spsc` for contender `who`: allocations per [`ALLOC_MSGS`]
/// messages on each flavour (NaN for the non-thread contenders).
fn alloc_spsc(who: usize) -> Vec<f64> {
    Flavour::ALL
        .iter()
        .map(|&f| match who {
            WEFT => allocs_spsc::<WeftChan>(f, ALLOC_MSGS),
            CROSSBEAM => allocs_spsc::<Crossbeam>(f, ALLOC_MSGS),
            FLUME => allocs_spsc::<Flume>(f, ALLOC_MSGS),
            KANAL => allocs_spsc::<Kanal>(f, ALLOC_MSGS),
            STD => allocs_spsc::<Std>(f, ALLOC_MSGS),
            _ => f64::NAN,
        })
        .collect()
}

/// Allocations per [`ALLOC_MSGS`] messages while a thread sends `n`
/// messages to another on `flavour` of `B`, after [`ALLOC_WARM`] untimed
/// ones (so that what each side sets up once, e.g. a thread's parker, is
/// not counted). Each thread counts its own allocations over its `n`
/// operations; both start after the warm-up (a barrier).
pub fn allocs_spsc<B: BlockingChan>(flavour: Flavour, n: usize) -> f64 {
    let Some((tx, rx)) = B::new(flavour.cap(n + ALLOC_WARM)) else {
        return f64::NAN;
    };
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let sender = std::thread::spawn(move || {
        // The receiver's first receive finds nothing and blocks, so that what its
        // thread sets up for a first block (a parker) falls in the warm-up too: on a
        // flavour with room for every value the sender never blocks, and a receiver
        // that kept up during the warm-up first blocked inside the count.
        std::thread::sleep(std::time::Duration::from_millis(5));
        for i in 0..ALLOC_WARM {
            assert!(B::send(&tx, Msg(i)), "receiver gone");
        }
        b.wait();
        let ((), allocs) = alloc_count::count_allocations(|| {
            for i in 0..n {
                assert!(B::send(&tx, Msg(i)), "receiver gone");
            }
        });
        allocs
    });
    let receiver = std::thread::spawn(move || {
        for _ in 0..ALLOC_WARM {
            B::recv(&rx).expect("sender gone");
        }
        barrier.wait();
        let ((), allocs) = alloc_count::count_allocations(|| {
            for _ in 0..n {
                B::recv(&rx).expect("sender gone");
            }
        });
        allocs
    });
    let allocs =
        sender.join().expect("sender panicked") + receiver.join().expect("receiver panicked");
    allocs as f64 * ALLOC_MSGS as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chan_shapes::run_async;

    const TINY: usize = 8 * ACTORS;

    #[test]
    fn case_names_parse_and_are_unique() {
        let all = ChanCase::all();
        assert_eq!(all.len(), 3 * (5 + 5 + 6 + 6));
        let mut names: Vec<String> = all.iter().map(|c| c.name()).collect();
        for (c, name) in all.iter().zip(&names) {
            assert_eq!(ChanCase::parse(name), Some(*c));
            assert_eq!(c.messages() % ACTORS, 0);
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(ChanCase::parse("threads_bounded0_seq"), None);
    }

    #[test]
    fn suite_lists_its_cases_and_checks() {
        let s = suite(&Options::for_tests());
        assert_eq!(s.command, "chan");
        assert_eq!(s.cases.len(), ChanCase::all().len() + 1);
        for check in &s.checks {
            assert!(s.cases.iter().any(|c| c.name == check.case));
        }
        // Every thread case is checked against crossbeam.
        let threads = ChanCase::all()
            .into_iter()
            .filter(|c| c.mode == Mode::Threads)
            .count();
        assert_eq!(
            s.checks.iter().filter(|c| c.vs == CROSSBEAM).count(),
            threads
        );
        // tokio has no rendezvous channel and one receiver per channel.
        assert!(!s
            .checks
            .iter()
            .any(|c| c.vs == TOKIO
                && (c.case.contains("bounded0") || c.case.contains("select_both"))));
    }

    #[test]
    fn who_takes_part() {
        let c = |mode, flavour, shape| ChanCase {
            mode,
            flavour,
            shape,
        };
        let spsc0 = c(Mode::Threads, Flavour::Bounded0, Shape::Spsc);
        for who in [WEFT, CROSSBEAM, FLUME, KANAL, STD] {
            assert!(takes_part(spsc0, who), "{}", CONTENDERS[who]);
        }
        for who in [TOKIO, ASYNC_CHANNEL, MAY] {
            assert!(!takes_part(spsc0, who), "{}", CONTENDERS[who]);
        }
        let mpmc = c(Mode::Threads, Flavour::Unbounded, Shape::Mpmc);
        assert!(!takes_part(mpmc, STD));
        let sel = c(Mode::Threads, Flavour::Bounded1, Shape::SelectRx);
        assert!(!takes_part(sel, KANAL) && takes_part(sel, FLUME));
        let t0 = c(Mode::Tasks, Flavour::Bounded0, Shape::Spsc);
        assert!(!takes_part(t0, TOKIO) && !takes_part(t0, ASYNC_CHANNEL));
        assert!(!takes_part(t0, FLUME));
        assert!(takes_part(t0, KANAL) && takes_part(t0, WEFT));
        // bounded(n) is no rendezvous channel.
        let tn = c(Mode::Tasks, Flavour::BoundedN, Shape::Seq);
        for who in [WEFT, TOKIO, ASYNC_CHANNEL, FLUME, KANAL] {
            assert!(takes_part(tn, who), "{}", CONTENDERS[who]);
        }
        let f = c(Mode::Fibers, Flavour::Bounded0, Shape::SelectBoth);
        assert!(!takes_part(f, MAY) && takes_part(f, WEFT));
        let f = c(Mode::Fibers, Flavour::Bounded0, Shape::SelectRx);
        assert!(takes_part(f, MAY));
    }

    /// Every shape on every flavour, tiny, for every contender that takes
    /// part: threads and tasks in-process; fibers on a weft runtime and on
    /// may in-process (the suite runs them in child processes).
    #[test]
    fn every_contender_runs_every_case() {
        let _may = crate::child::may_in_process();
        for c in ChanCase::all() {
            let (shape, flavour) = (c.shape, c.flavour);
            match c.mode {
                Mode::Threads => {
                    for who in [WEFT, CROSSBEAM, FLUME, KANAL, STD] {
                        if !takes_part(c, who) {
                            continue;
                        }
                        let d = match who {
                            WEFT => run_blocking::<WeftChan, Threads>(shape, flavour, TINY),
                            CROSSBEAM => run_blocking::<Crossbeam, Threads>(shape, flavour, TINY),
                            FLUME => run_blocking::<Flume, Threads>(shape, flavour, TINY),
                            KANAL => run_blocking::<Kanal, Threads>(shape, flavour, TINY),
                            _ => run_blocking::<Std, Threads>(shape, flavour, TINY),
                        };
                        assert!(d.is_some(), "{} on {}", c.name(), CONTENDERS[who]);
                    }
                }
                Mode::Tasks => {
                    let weft = build::<Weft>(2, true);
                    let tokio = build::<Tokio>(2, true);
                    for who in [WEFT, TOKIO, ASYNC_CHANNEL, FLUME, KANAL] {
                        if !takes_part(c, who) {
                            continue;
                        }
                        let d = match who {
                            WEFT => run_async::<WeftAsync, _>(&weft, shape, flavour, TINY),
                            TOKIO => run_async::<TokioMpsc, _>(&tokio, shape, flavour, TINY),
                            ASYNC_CHANNEL => {
                                run_async::<AsyncChannel, _>(&tokio, shape, flavour, TINY)
                            }
                            FLUME => run_async::<FlumeAsync, _>(&tokio, shape, flavour, TINY),
                            _ => run_async::<KanalAsync, _>(&tokio, shape, flavour, TINY),
                        };
                        assert!(d.is_some(), "{} on {}", c.name(), CONTENDERS[who]);
                    }
                    weft.shutdown();
                    tokio.shutdown();
                }
                Mode::Fibers => {
                    if takes_part(c, WEFT) {
                        let rt = Weft::with_pools(2, 0).expect("cannot build weft");
                        let d = rt.runtime().block_on(async move {
                            run_blocking::<WeftChan, WeftFibers>(shape, flavour, TINY)
                        });
                        assert!(d.is_some(), "{} on weft", c.name());
                        drop(rt);
                    }
                    if takes_part(c, MAY) {
                        let d = if shape == Shape::Mpmc {
                            run_blocking::<MayMpmc, MayCoroutines>(shape, flavour, TINY)
                        } else {
                            run_blocking::<MayMpsc, MayCoroutines>(shape, flavour, TINY)
                        };
                        assert!(d.is_some(), "{} on may", c.name());
                    }
                }
            }
        }
    }

    /// The target: weft's bounded channels allocate nothing per
    /// message, thread to thread. A per-message allocation would count
    /// 10,000 per 10k messages; a handful per run (a waiter's first park,
    /// a wait list's growth, weft's buffer growing by doubling beyond 4,096
    /// slots) is not per message, and its timing varies, so the bound is
    /// 1 allocation per 100 messages.
    #[test]
    fn weft_bounded_channels_allocate_nothing_per_message() {
        for flavour in [Flavour::Bounded0, Flavour::Bounded1, Flavour::BoundedN] {
            let per_10k = allocs_spsc::<WeftChan>(flavour, 10_000);
            assert!(
                per_10k < 100.0,
                "weft {}: {per_10k} allocations per 10k messages",
                flavour.name()
            );
        }
    }

    #[test]
    fn counting_allocator_counts() {
        let (v, allocs) =
            alloc_count::count_allocations(|| std::hint::black_box(Vec::<u64>::with_capacity(10)));
        drop(v);
        assert_eq!(allocs, 1);
        let ((), allocs) = alloc_count::count_allocations(|| ());
        assert_eq!(allocs, 0);
        // crossbeam's bounded channels do not allocate per message (a rare
        // one on a parking path, at most); its unbounded one allocates one
        // block per 31 messages.
        assert!(allocs_spsc::<Crossbeam>(Flavour::Bounded1, 10_000) < 100.0);
        assert!(allocs_spsc::<Crossbeam>(Flavour::Unbounded, 10_000) > 300.0);
    }
}
