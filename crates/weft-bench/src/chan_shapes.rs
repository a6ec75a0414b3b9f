//! The case shapes of the `chan` suite, those of crossbeam-channel's own
//! benchmark suite (`crossbeam-channel/benchmarks`), each written once for
//! every blocking channel ([`run_blocking`], on threads, fibers or
//! coroutines) and once for every async channel ([`run_async`], on tasks):
//!
//! * `seq`: one actor sends `n` messages, then receives them (buffering
//!   flavours only: a channel of capacity 0 or 1 cannot hold them);
//! * `spsc`: one actor sends `n`, another receives them;
//! * `mpsc`: [`ACTORS`] actors send `n / ACTORS` each into one channel,
//!   one actor receives all `n`;
//! * `mpmc`: [`ACTORS`] senders, [`ACTORS`] receivers of `n / ACTORS` each,
//!   one channel;
//! * `select_rx`: [`ACTORS`] channels, one sender of `n / ACTORS` on each;
//!   one receiver selects over the channels until all are closed;
//! * `select_both`: [`ACTORS`] channels; [`ACTORS`] senders each send
//!   `n / ACTORS` messages, each by a select over sends on all channels;
//!   [`ACTORS`] receivers select over receives on all channels until all are
//!   closed.
//!
//! As in crossbeam's suite, a select is built afresh for every message. The
//! selecting receivers stop once every channel is closed (its senders gone)
//! and drained, and leave a closed channel out of their later selects; the
//! shape then checks that exactly `n` messages arrived (at least `n` for a
//! contender whose select may move more than one message, see
//! [`BlockingChan::EXACT_SELECT`]). Every actor, receivers included, is
//! spawned (a thread, fiber, coroutine or task); the measuring thread only
//! waits for them. The time runs from the first actor's start to the last
//! actor's end, by the actors' own clock readings: neither spawning them
//! nor waking the measuring thread counts (on 2 cores, a measuring thread
//! released by a barrier together with the actors may well run only after
//! them). The channels are made before.

use std::future::Future;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::chan_peers::{AsyncChan, BlockingChan, Msg};
use crate::runtimes::{JoinOf, Rt};

/// Senders and receivers in the many-actor shapes (crossbeam's `THREADS`).
pub const ACTORS: usize = 4;

/// A case shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Seq,
    Spsc,
    Mpsc,
    Mpmc,
    SelectRx,
    SelectBoth,
}

impl Shape {
    pub const ALL: [Shape; 6] = [
        Shape::Seq,
        Shape::Spsc,
        Shape::Mpsc,
        Shape::Mpmc,
        Shape::SelectRx,
        Shape::SelectBoth,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Seq => "seq",
            Shape::Spsc => "spsc",
            Shape::Mpsc => "mpsc",
            Shape::Mpmc => "mpmc",
            Shape::SelectRx => "select_rx",
            Shape::SelectBoth => "select_both",
        }
    }

    /// Whether the shape needs several receivers on one channel.
    fn needs_mpmc(self) -> bool {
        matches!(self, Shape::Mpmc | Shape::SelectBoth)
    }

    /// Whether the shape needs a select.
    fn needs_select(self) -> bool {
        matches!(self, Shape::SelectRx | Shape::SelectBoth)
    }
}

/// A channel flavour, named as in crossbeam's suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// `bounded(0)`: the rendezvous channel.
    Bounded0,
    /// `bounded(1)`.
    Bounded1,
    /// `bounded(n)`, room for every message of the run.
    BoundedN,
    /// `unbounded()`.
    Unbounded,
}

impl Flavour {
    pub const ALL: [Flavour; 4] = [
        Flavour::Bounded0,
        Flavour::Bounded1,
        Flavour::BoundedN,
        Flavour::Unbounded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flavour::Bounded0 => "bounded0",
            Flavour::Bounded1 => "bounded1",
            Flavour::BoundedN => "bounded",
            Flavour::Unbounded => "unbounded",
        }
    }

    /// The capacity for a run of `n` messages (`None`: unbounded).
    pub fn cap(self, n: usize) -> Option<usize> {
        match self {
            Flavour::Bounded0 => Some(0),
            Flavour::Bounded1 => Some(1),
            Flavour::BoundedN => Some(n),
            Flavour::Unbounded => None,
        }
    }

    /// Whether the channel buffers a whole run (the flavours `seq` runs
    /// on).
    pub fn buffers(self) -> bool {
        matches!(self, Flavour::BoundedN | Flavour::Unbounded)
    }

    /// The shapes run on this flavour.
    pub fn shapes(self) -> impl Iterator<Item = Shape> {
        Shape::ALL
            .into_iter()
            .filter(move |&s| s != Shape::Seq || self.buffers())
    }
}

/// What a channel can do, for [`Abilities::run`].
struct Abilities {
    has_flavour: bool,
    mpmc: bool,
    select: bool,
    select_send: bool,
}

impl Abilities {
    /// Whether a channel with these abilities can run `shape`.
    fn run(&self, shape: Shape) -> bool {
        self.has_flavour
            && (self.mpmc || !shape.needs_mpmc())
            && (self.select || !shape.needs_select())
            && (self.select_send || shape != Shape::SelectBoth)
    }
}

/// Whether blocking channel `B` can run `shape` on `flavour`.
pub fn blocking_supports<B: BlockingChan>(shape: Shape, flavour: Flavour) -> bool {
    Abilities {
        has_flavour: B::new(flavour.cap(ACTORS)).is_some(),
        mpmc: B::MPMC,
        select: B::SELECT,
        select_send: B::SELECT_SEND,
    }
    .run(shape)
}

/// Whether async channel `C` can run `shape` on `flavour`.
pub fn async_supports<C: AsyncChan>(shape: Shape, flavour: Flavour) -> bool {
    Abilities {
        has_flavour: C::new(flavour.cap(ACTORS)).is_some(),
        mpmc: C::MPMC,
        select: C::SELECT,
        select_send: C::SELECT_SEND,
    }
    .run(shape)
}

/// Checks the number of messages that arrived.
fn check_total(name: &str, shape: Shape, exact_select: bool, n: usize, got: usize) {
    if shape.needs_select() && !exact_select {
        assert!(
            got >= n,
            "{name} {}: {got} of {n} messages arrived",
            shape.name()
        );
    } else {
        assert_eq!(got, n, "{name} {}: wrong number of messages", shape.name());
    }
}

/// `n` split among [`ACTORS`] actors (the shapes use multiples of it).
fn share(n: usize) -> usize {
    assert_eq!(
        n % ACTORS,
        0,
        "{n} messages do not split among {ACTORS} actors"
    );
    n / ACTORS
}

// ------------------------------------------------------------ blocking ----

/// One actor of a blocking shape: returns how many messages it received.
pub type Job = Box<dyn FnOnce() -> usize + Send + 'static>;

/// What an actor reports: when it started and finished (its own clock
/// readings) and how many messages it received.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    start: Instant,
    end: Instant,
    got: usize,
}

/// Runs `job`, reading the clock right before and after it.
pub fn stamped(job: Job) -> Report {
    let start = Instant::now();
    let got = job();
    Report {
        start,
        end: Instant::now(),
        got,
    }
}

/// The time from the first actor's start to the last actor's end, and the
/// messages they received in all.
pub fn span(reports: impl IntoIterator<Item = Report>) -> (Duration, usize) {
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut got = 0;
    for r in reports {
        first = Some(first.map_or(r.start, |f| f.min(r.start)));
        last = Some(last.map_or(r.end, |l| l.max(r.end)));
        got += r.got;
    }
    let elapsed = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f),
        _ => Duration::ZERO,
    };
    (elapsed, got)
}

/// What runs the actors of a blocking shape: threads, fibers or coroutines.
pub trait Actors {
    /// Runs `jobs` concurrently, one actor each, each through [`stamped`],
    /// and returns their reports once all have finished.
    fn run(jobs: Vec<Job>) -> Vec<Report>;
}

/// Plain threads, released together by a start barrier once all have been
/// spawned (spawning a thread costs far more than spawning a fiber or a
/// task).
pub struct Threads;

impl Actors for Threads {
    fn run(jobs: Vec<Job>) -> Vec<Report> {
        let gate = Arc::new(Barrier::new(jobs.len()));
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|job| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    gate.wait();
                    stamped(job)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    }
}

/// An actor sending `k` messages.
fn sender<B: BlockingChan>(tx: B::Tx, k: usize) -> Job {
    Box::new(move || {
        for i in 0..k {
            assert!(B::send(&tx, Msg(i)), "{}: receiver gone", B::NAME);
        }
        0
    })
}

/// An actor receiving `k` messages.
fn receiver<B: BlockingChan>(rx: B::Rx, k: usize) -> Job {
    Box::new(move || {
        for _ in 0..k {
            B::recv(&rx).unwrap_or_else(|| panic!("{}: channel closed early", B::NAME));
        }
        k
    })
}

/// An actor receiving by select over `rxs` until every channel is closed
/// and drained.
fn select_receiver<B: BlockingChan>(rxs: Vec<B::Rx>) -> Job {
    Box::new(move || {
        let mut open: Vec<usize> = (0..rxs.len()).collect();
        let mut got = 0;
        while !open.is_empty() {
            got += B::select_recv(&rxs, &mut open);
        }
        got
    })
}

/// Runs `shape` on `flavour` of `B` with `n` messages (a multiple of
/// [`ACTORS`]), the actors run by `A`. Returns the time, or `None` if `B`
/// cannot run it.
pub fn run_blocking<B: BlockingChan, A: Actors>(
    shape: Shape,
    flavour: Flavour,
    n: usize,
) -> Option<Duration> {
    if !blocking_supports::<B>(shape, flavour) {
        return None;
    }
    let cap = flavour.cap(n);
    let new = || B::new(cap).expect("flavour checked above");
    let mut jobs: Vec<Job> = Vec::new();
    match shape {
        Shape::Seq => {
            let (tx, rx) = new();
            jobs.push(Box::new(move || {
                for i in 0..n {
                    assert!(B::send(&tx, Msg(i)), "{}: receiver gone", B::NAME);
                }
                (0..n).filter(|_| B::recv(&rx).is_some()).count()
            }));
        }
        Shape::Spsc => {
            let (tx, rx) = new();
            jobs.push(sender::<B>(tx, n));
            jobs.push(receiver::<B>(rx, n));
        }
        Shape::Mpsc | Shape::Mpmc => {
            let (tx, rx) = new();
            for _ in 0..ACTORS {
                jobs.push(sender::<B>(B::clone_tx(&tx), share(n)));
            }
            drop(tx);
            if shape == Shape::Mpsc {
                jobs.push(receiver::<B>(rx, n));
            } else {
                for _ in 0..ACTORS {
                    jobs.push(receiver::<B>(B::clone_rx(&rx), share(n)));
                }
            }
        }
        Shape::SelectRx => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..ACTORS).map(|_| new()).unzip();
            for tx in txs {
                jobs.push(sender::<B>(tx, share(n)));
            }
            jobs.push(select_receiver::<B>(rxs));
        }
        Shape::SelectBoth => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..ACTORS).map(|_| new()).unzip();
            for _ in 0..ACTORS {
                let txs: Vec<_> = txs.iter().map(B::clone_tx).collect();
                let k = share(n);
                jobs.push(Box::new(move || {
                    let mut open: Vec<usize> = (0..txs.len()).collect();
                    let mut sent = 0;
                    while sent < k && !open.is_empty() {
                        sent += B::select_send(&txs, &mut open, Msg(sent));
                    }
                    assert_eq!(sent, k, "{}: receivers gone", B::NAME);
                    0
                }));
            }
            drop(txs);
            for _ in 0..ACTORS {
                let rxs: Vec<_> = rxs.iter().map(B::clone_rx).collect();
                jobs.push(select_receiver::<B>(rxs));
            }
        }
    }
    let (elapsed, got) = span(A::run(jobs));
    check_total(B::NAME, shape, B::EXACT_SELECT, n, got);
    Some(elapsed)
}

// --------------------------------------------------------------- async ----

/// A task sending `k` messages.
async fn send_task<C: AsyncChan>(tx: C::Tx, k: usize) -> usize {
    for i in 0..k {
        assert!(C::send(&tx, Msg(i)).await, "{}: receiver gone", C::NAME);
    }
    0
}

/// A task receiving `k` messages.
async fn recv_task<C: AsyncChan>(mut rx: C::Rx, k: usize) -> usize {
    for _ in 0..k {
        let m = C::recv(&mut rx).await;
        m.unwrap_or_else(|| panic!("{}: channel closed early", C::NAME));
    }
    k
}

/// A task receiving by select over `rxs` until every channel is closed and
/// drained.
async fn select_recv_task<C: AsyncChan>(mut rxs: Vec<C::Rx>) -> usize {
    let mut open: Vec<usize> = (0..rxs.len()).collect();
    let mut got = 0;
    while !open.is_empty() {
        got += C::select_recv(&mut rxs, &mut open).await;
    }
    got
}

/// A task sending `k` messages, each by a select over sends on `txs`.
async fn select_send_task<C: AsyncChan>(txs: Vec<C::Tx>, k: usize) -> usize {
    let mut open: Vec<usize> = (0..txs.len()).collect();
    let mut sent = 0;
    while sent < k && !open.is_empty() {
        sent += C::select_send(&txs, &mut open, Msg(sent)).await;
    }
    assert_eq!(sent, k, "{}: receivers gone", C::NAME);
    0
}

/// Runs the task `f`, reading the clock right before and after it.
async fn stamped_task(f: impl Future<Output = usize>) -> Report {
    let start = Instant::now();
    let got = f.await;
    Report {
        start,
        end: Instant::now(),
        got,
    }
}

/// Runs `shape` on `flavour` of `C` with `n` messages (a multiple of
/// [`ACTORS`]) in tasks spawned on `rt` from this (non-worker) thread,
/// which then waits for them in `block_on`. Returns the time, or `None` if
/// `C` cannot run it.
pub fn run_async<C: AsyncChan, R: Rt>(
    rt: &R,
    shape: Shape,
    flavour: Flavour,
    n: usize,
) -> Option<Duration> {
    if !async_supports::<C>(shape, flavour) {
        return None;
    }
    let cap = flavour.cap(n);
    let new = || C::new(cap).expect("flavour checked above");
    let mut handles: Vec<JoinOf<R, Report>> = Vec::new();
    match shape {
        Shape::Seq => {
            let (tx, mut rx) = new();
            handles.push(rt.spawn(stamped_task(async move {
                for i in 0..n {
                    assert!(C::send(&tx, Msg(i)).await, "{}: receiver gone", C::NAME);
                }
                let mut got = 0;
                for _ in 0..n {
                    got += usize::from(C::recv(&mut rx).await.is_some());
                }
                got
            })));
        }
        Shape::Spsc => {
            let (tx, rx) = new();
            handles.push(rt.spawn(stamped_task(send_task::<C>(tx, n))));
            handles.push(rt.spawn(stamped_task(recv_task::<C>(rx, n))));
        }
        Shape::Mpsc | Shape::Mpmc => {
            let (tx, rx) = new();
            for _ in 0..ACTORS {
                handles.push(rt.spawn(stamped_task(send_task::<C>(C::clone_tx(&tx), share(n)))));
            }
            drop(tx);
            if shape == Shape::Mpsc {
                handles.push(rt.spawn(stamped_task(recv_task::<C>(rx, n))));
            } else {
                for _ in 0..ACTORS {
                    handles
                        .push(rt.spawn(stamped_task(recv_task::<C>(C::clone_rx(&rx), share(n)))));
                }
            }
        }
        Shape::SelectRx => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..ACTORS).map(|_| new()).unzip();
            for tx in txs {
                handles.push(rt.spawn(stamped_task(send_task::<C>(tx, share(n)))));
            }
            handles.push(rt.spawn(stamped_task(select_recv_task::<C>(rxs))));
        }
        Shape::SelectBoth => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..ACTORS).map(|_| new()).unzip();
            for _ in 0..ACTORS {
                let txs: Vec<_> = txs.iter().map(C::clone_tx).collect();
                handles.push(rt.spawn(stamped_task(select_send_task::<C>(txs, share(n)))));
            }
            drop(txs);
            for _ in 0..ACTORS {
                let rxs: Vec<_> = rxs.iter().map(C::clone_rx).collect();
                handles.push(rt.spawn(stamped_task(select_recv_task::<C>(rxs))));
            }
        }
    }
    let reports = rt.block_on(async move {
        let mut reports = Vec::with_capacity(handles.len());
        for h in handles {
            reports.push(h.await);
        }
        reports
    });
    let (elapsed, got) = span(reports);
    check_total(C::NAME, shape, C::EXACT_SELECT, n, got);
    Some(elapsed)
}
