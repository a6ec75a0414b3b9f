//! The channels of the `chan` suite behind two small traits, so that every
//! case shape ([`chan_shapes`](crate::chan_shapes)) is written once:
//!
//! * [`BlockingChan`]: a channel used with blocking calls, from plain
//!   threads, weft fibers or may coroutines (crossbeam-channel, flume,
//!   kanal, `std::sync::mpsc`, may's `mpsc` and `mpmc`; weft's in
//!   [`chan_weft`](crate::chan_weft));
//! * [`AsyncChan`]: a channel used with `.await` from async tasks (tokio's
//!   `mpsc`, async-channel, flume's and kanal's async sides; weft's in
//!   [`chan_weft`](crate::chan_weft)).
//!
//! A channel that lacks a flavour (tokio and async-channel have no
//! rendezvous channel), several receivers per channel ([`BlockingChan::MPMC`])
//! or a select ([`BlockingChan::SELECT`], [`BlockingChan::SELECT_SEND`])
//! says so, and the shapes that need it report no figure for it. Select over several channels is each crate's
//! own where it has one (crossbeam's `Select`, flume's `Selector`, may's
//! `cqueue`, the base of its `select!`); the async peers, which have none,
//! use `tokio::select!` over their `recv` / `send` futures, the idiomatic
//! way on tokio. kanal gets no select cases: it has no select, and its
//! receive future is not cancel-safe (dropping one that a sender has
//! already filled drops the message), so `tokio::select!` would lose
//! messages.

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// The message: one word, as crossbeam-channel's benchmarks send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg(pub usize);

/// Removes the channel index `open[k]` from `open` (it was found closed).
pub fn close_at(open: &mut Vec<usize>, k: usize) {
    open.swap_remove(k);
}

/// A channel used with blocking calls (threads, fibers, coroutines).
pub trait BlockingChan: 'static {
    /// The name in the table.
    const NAME: &'static str;
    /// Whether a receiver can be cloned (several consumers of one channel):
    /// `mpmc` and `select_both` need it.
    const MPMC: bool;
    /// Whether it can select over receives on several channels.
    const SELECT: bool;
    /// Whether it can select over sends on several channels (`select_both`).
    const SELECT_SEND: bool = Self::SELECT;
    /// Whether exactly the messages sent by the select shapes arrive (so
    /// the shapes can check that); `false` where a select may also move a
    /// message it does not report, so that more arrive.
    const EXACT_SELECT: bool = true;

    type Tx: Send + 'static;
    type Rx: Send + 'static;

    /// A channel of capacity `cap` (`None`: unbounded), or `None` if it has
    /// no such flavour.
    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)>;
    fn clone_tx(tx: &Self::Tx) -> Self::Tx;
    /// Only called when [`MPMC`](Self::MPMC).
    fn clone_rx(rx: &Self::Rx) -> Self::Rx;
    /// Blocks until sent; `false` if every receiver is gone.
    fn send(tx: &Self::Tx, m: Msg) -> bool;
    /// Blocks until a message arrives; `None` once closed and drained.
    fn recv(rx: &Self::Rx) -> Option<Msg>;
    /// One select over the receives on `rxs[i]` for every `i` in `open`
    /// (not empty): returns how many messages it received (1, or 0 when the
    /// operation selected found its channel closed and drained, which it
    /// then removes from `open`; may's select can take more than one, one
    /// per arm that found a message). Only called when
    /// [`SELECT`](Self::SELECT).
    fn select_recv(rxs: &[Self::Rx], open: &mut Vec<usize>) -> usize;
    /// One select over the sends of `m` on `txs[i]` for every `i` in `open`:
    /// returns how many messages it sent (1, or 0 when the selected channel
    /// has no receiver left; it is then removed from `open`).
    fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize;
}

/// A channel used with `.await` from async tasks.
pub trait AsyncChan: 'static {
    const NAME: &'static str;
    const MPMC: bool;
    const SELECT: bool;
    const SELECT_SEND: bool = Self::SELECT;
    const EXACT_SELECT: bool = true;

    type Tx: Send + Sync + 'static;
    type Rx: Send + 'static;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)>;
    fn clone_tx(tx: &Self::Tx) -> Self::Tx;
    fn clone_rx(rx: &Self::Rx) -> Self::Rx;
    fn send(tx: &Self::Tx, m: Msg) -> impl Future<Output = bool> + Send;
    fn recv(rx: &mut Self::Rx) -> impl Future<Output = Option<Msg>> + Send;
    /// As [`BlockingChan::select_recv`], awaiting.
    fn select_recv(
        rxs: &mut [Self::Rx],
        open: &mut Vec<usize>,
    ) -> impl Future<Output = usize> + Send;
    /// As [`BlockingChan::select_send`], awaiting.
    fn select_send(
        txs: &[Self::Tx],
        open: &mut Vec<usize>,
        m: Msg,
    ) -> impl Future<Output = usize> + Send;
}

/// For channels without select: the shapes never call these.
fn no_select(name: &str) -> ! {
    unreachable!("{name} has no select")
}

// ----------------------------------------------------------- crossbeam ----

/// crossbeam-channel 0.5.
pub struct Crossbeam;

impl BlockingChan for Crossbeam {
    const NAME: &'static str = "crossbeam";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = crossbeam_channel::Sender<Msg>;
    type Rx = crossbeam_channel::Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(match cap {
            Some(cap) => crossbeam_channel::bounded(cap),
            None => crossbeam_channel::unbounded(),
        })
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    fn select_recv(rxs: &[Self::Rx], open: &mut Vec<usize>) -> usize {
        let mut sel = crossbeam_channel::Select::new();
        for &i in open.iter() {
            sel.recv(&rxs[i]);
        }
        let oper = sel.select();
        let k = oper.index();
        match oper.recv(&rxs[open[k]]) {
            Ok(_) => 1,
            Err(_) => {
                close_at(open, k);
                0
            }
        }
    }

    fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let mut sel = crossbeam_channel::Select::new();
        for &i in open.iter() {
            sel.send(&txs[i]);
        }
        let oper = sel.select();
        let k = oper.index();
        match oper.send(&txs[open[k]], m) {
            Ok(()) => 1,
            Err(_) => {
                close_at(open, k);
                0
            }
        }
    }
}

// --------------------------------------------------------------- flume ----

/// flume, its blocking side and its `Selector` (receives only: see
/// [`Flume::SELECT_SEND`]).
pub struct Flume;

impl BlockingChan for Flume {
    const NAME: &'static str = "flume";
    const MPMC: bool = true;
    const SELECT: bool = true;
    /// flume 0.11's `Selector` over sends is left out: here it completed
    /// more sends than it reported (7 messages arrived where 4 selects sent
    /// one each, on `bounded(0)`) and hung on `bounded(n)`.
    const SELECT_SEND: bool = false;
    type Tx = flume::Sender<Msg>;
    type Rx = flume::Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(match cap {
            Some(cap) => flume::bounded(cap),
            None => flume::unbounded(),
        })
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    fn select_recv(rxs: &[Self::Rx], open: &mut Vec<usize>) -> usize {
        let mut sel = flume::Selector::new();
        for (k, &i) in open.iter().enumerate() {
            sel = sel.recv(&rxs[i], move |r| (k, r.is_ok()));
        }
        match sel.wait() {
            (_, true) => 1,
            (k, false) => {
                close_at(open, k);
                0
            }
        }
    }

    fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let mut sel = flume::Selector::new();
        for (k, &i) in open.iter().enumerate() {
            sel = sel.send(&txs[i], m, move |r| (k, r.is_ok()));
        }
        match sel.wait() {
            (_, true) => 1,
            (k, false) => {
                close_at(open, k);
                0
            }
        }
    }
}

// --------------------------------------------------------------- kanal ----

/// kanal, its blocking side (no select).
pub struct Kanal;

impl BlockingChan for Kanal {
    const NAME: &'static str = "kanal";
    const MPMC: bool = true;
    const SELECT: bool = false;
    type Tx = kanal::Sender<Msg>;
    type Rx = kanal::Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(match cap {
            Some(cap) => kanal::bounded(cap),
            None => kanal::unbounded(),
        })
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    fn select_recv(_: &[Self::Rx], _: &mut Vec<usize>) -> usize {
        no_select(Self::NAME)
    }

    fn select_send(_: &[Self::Tx], _: &mut Vec<usize>, _: Msg) -> usize {
        no_select(Self::NAME)
    }
}

// ----------------------------------------------------------------- std ----

/// `std::sync::mpsc`: `sync_channel(cap)` for the bounded flavours,
/// `channel()` for unbounded; one consumer, no select.
pub struct Std;

/// The two sender types of `std::sync::mpsc`.
pub enum StdTx {
    Bounded(std::sync::mpsc::SyncSender<Msg>),
    Unbounded(std::sync::mpsc::Sender<Msg>),
}

impl BlockingChan for Std {
    const NAME: &'static str = "std";
    const MPMC: bool = false;
    const SELECT: bool = false;
    type Tx = StdTx;
    type Rx = std::sync::mpsc::Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(match cap {
            Some(cap) => {
                let (tx, rx) = std::sync::mpsc::sync_channel(cap);
                (StdTx::Bounded(tx), rx)
            }
            None => {
                let (tx, rx) = std::sync::mpsc::channel();
                (StdTx::Unbounded(tx), rx)
            }
        })
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        match tx {
            StdTx::Bounded(tx) => StdTx::Bounded(tx.clone()),
            StdTx::Unbounded(tx) => StdTx::Unbounded(tx.clone()),
        }
    }

    fn clone_rx(_: &Self::Rx) -> Self::Rx {
        unreachable!("std's mpsc has one receiver")
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        match tx {
            StdTx::Bounded(tx) => tx.send(m).is_ok(),
            StdTx::Unbounded(tx) => tx.send(m).is_ok(),
        }
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    fn select_recv(_: &[Self::Rx], _: &mut Vec<usize>) -> usize {
        no_select(Self::NAME)
    }

    fn select_send(_: &[Self::Tx], _: &mut Vec<usize>, _: Msg) -> usize {
        no_select(Self::NAME)
    }
}

// ----------------------------------------------------------------- may ----

/// may's `sync::mpsc` (unbounded whatever the flavour: may has no bounded
/// channel), with a select built on its `cqueue` as its `select!` macro
/// is, one arm per open channel.
pub struct MayMpsc;

/// Lets the arms of a may select (coroutines of their own) borrow a
/// receiver that is `Send` but not `Sync`.
struct Borrowed<'a, T>(&'a T);

// SAFETY: each arm of `MayMpsc::select_recv` touches only its own
// receiver, one arm per receiver, and the coroutine that owns the receivers
// waits in `poll` and in the cqueue's drop (which waits for every arm to
// finish or be cancelled) until no arm uses them any more; so no receiver
// is used by two coroutines at once.
unsafe impl<T> Send for Borrowed<'_, T> {}

impl BlockingChan for MayMpsc {
    const NAME: &'static str = "may";
    const MPMC: bool = false;
    const SELECT: bool = true;
    type Tx = may::sync::mpsc::Sender<Msg>;
    type Rx = may::sync::mpsc::Receiver<Msg>;

    fn new(_: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(may::sync::mpsc::channel())
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(_: &Self::Rx) -> Self::Rx {
        unreachable!("may's mpsc has one receiver")
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    /// What `may::select!` does, with one arm per open channel: each arm is
    /// a coroutine that receives and reports to the cqueue; the first report
    /// ends the select, and the cqueue's drop cancels the arms still
    /// waiting. An arm may have taken a message before it is cancelled, so
    /// the arms count what they take the moment they take it.
    fn select_recv(rxs: &[Self::Rx], open: &mut Vec<usize>) -> usize {
        let got = AtomicUsize::new(0);
        let closed: Vec<AtomicUsize> = open.iter().map(|_| AtomicUsize::new(0)).collect();
        may::cqueue::scope(|cq| {
            for (k, &i) in open.iter().enumerate() {
                let (rx, got, closed) = (Borrowed(&rxs[i]), &got, &closed[k]);
                // The arm is a coroutine of its own (as with `may::go!`, it
                // keeps no thread-local and uses little stack).
                cq.add(k, move |es| {
                    let rx = rx;
                    match rx.0.recv() {
                        Ok(_) => got.fetch_add(1, Relaxed),
                        Err(_) => closed.fetch_add(1, Relaxed),
                    };
                    es.send(0);
                });
            }
            cq.poll(None).expect("may select failed");
        });
        // The scope has ended: every arm has finished or was cancelled.
        let mut k = open.len();
        while k > 0 {
            k -= 1;
            if closed[k].load(Relaxed) > 0 {
                close_at(open, k);
            }
        }
        got.load(Relaxed)
    }

    fn select_send(_: &[Self::Tx], _: &mut Vec<usize>, _: Msg) -> usize {
        // select_both needs several receivers per channel: never called.
        no_select("may's mpsc (send)")
    }
}

/// may's `sync::mpmc` (unbounded), for the one shape that needs several
/// receivers per channel and no select: `mpmc`. may gets no `select_both`:
/// its sends never block, so a select over them is moot, and its `mpmc`
/// receivers cannot drain in a select until the channels close, as the
/// shape's receivers do: when the last sender goes, `mpmc` posts its
/// semaphore only while the count is 0, which wakes one waiting receiver,
/// not all of them.
pub struct MayMpmc;

impl BlockingChan for MayMpmc {
    const NAME: &'static str = "may";
    const MPMC: bool = true;
    const SELECT: bool = false;
    type Tx = may::sync::mpmc::Sender<Msg>;
    type Rx = may::sync::mpmc::Receiver<Msg>;

    fn new(_: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(may::sync::mpmc::channel())
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv().ok()
    }

    fn select_recv(_: &[Self::Rx], _: &mut Vec<usize>) -> usize {
        no_select("may's mpmc")
    }

    fn select_send(_: &[Self::Tx], _: &mut Vec<usize>, _: Msg) -> usize {
        no_select("may's mpmc")
    }
}

// ----------------------------------------------- async: tokio::select! ----

/// `tokio::select!` over up to four futures, one per channel index in
/// `open` (the shapes use four channels); branches whose index is not open
/// are disabled. tokio's select picks a random ready branch first, as
/// crossbeam's does. Returns the position in `open` of the branch that
/// completed and its output.
async fn select4<'a, F: Future + Send + 'a>(
    open: &[usize],
    mut make: impl FnMut(usize) -> Option<F>,
) -> (usize, F::Output) {
    assert!(
        open.len() <= 4,
        "select4 selects over at most four channels"
    );
    let mut futs: [Option<F>; 4] = [None, None, None, None];
    for (k, &i) in open.iter().enumerate() {
        futs[k] = make(i);
    }
    let [f0, f1, f2, f3] = futs;
    let on = [f0.is_some(), f1.is_some(), f2.is_some(), f3.is_some()];
    // A disabled branch's future is built but never polled.
    let run = |f: Option<F>| async move { f.expect("a disabled branch was polled").await };
    tokio::select! {
        v = run(f0), if on[0] => (0, v),
        v = run(f1), if on[1] => (1, v),
        v = run(f2), if on[2] => (2, v),
        v = run(f3), if on[3] => (3, v),
    }
}

/// Splits `rxs` into one mutable borrow per element, as `Option`s indexed
/// like `rxs`, for building one receive future per channel.
fn each_mut<T>(rxs: &mut [T]) -> Vec<Option<&mut T>> {
    rxs.iter_mut().map(Some).collect()
}

// --------------------------------------------------------------- tokio ----

/// tokio's `sync::mpsc` (`channel(cap)`, `unbounded_channel()`); no
/// rendezvous flavour (capacity 0 panics), one consumer.
pub struct TokioMpsc;

/// The two sender types of tokio's mpsc.
pub enum TokioTx {
    Bounded(tokio::sync::mpsc::Sender<Msg>),
    Unbounded(tokio::sync::mpsc::UnboundedSender<Msg>),
}

/// The two receiver types of tokio's mpsc.
pub enum TokioRx {
    Bounded(tokio::sync::mpsc::Receiver<Msg>),
    Unbounded(tokio::sync::mpsc::UnboundedReceiver<Msg>),
}

impl TokioRx {
    async fn recv(&mut self) -> Option<Msg> {
        match self {
            TokioRx::Bounded(rx) => rx.recv().await,
            TokioRx::Unbounded(rx) => rx.recv().await,
        }
    }
}

impl TokioTx {
    async fn send(&self, m: Msg) -> bool {
        match self {
            TokioTx::Bounded(tx) => tx.send(m).await.is_ok(),
            TokioTx::Unbounded(tx) => tx.send(m).is_ok(),
        }
    }
}

impl AsyncChan for TokioMpsc {
    const NAME: &'static str = "tokio";
    const MPMC: bool = false;
    const SELECT: bool = true;
    type Tx = TokioTx;
    type Rx = TokioRx;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        match cap {
            Some(0) => None,
            Some(cap) => {
                let (tx, rx) = tokio::sync::mpsc::channel(cap);
                Some((TokioTx::Bounded(tx), TokioRx::Bounded(rx)))
            }
            None => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                Some((TokioTx::Unbounded(tx), TokioRx::Unbounded(rx)))
            }
        }
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        match tx {
            TokioTx::Bounded(tx) => TokioTx::Bounded(tx.clone()),
            TokioTx::Unbounded(tx) => TokioTx::Unbounded(tx.clone()),
        }
    }

    fn clone_rx(_: &Self::Rx) -> Self::Rx {
        unreachable!("tokio's mpsc has one receiver")
    }

    fn send(tx: &Self::Tx, m: Msg) -> impl Future<Output = bool> + Send {
        tx.send(m)
    }

    fn recv(rx: &mut Self::Rx) -> impl Future<Output = Option<Msg>> + Send {
        rx.recv()
    }

    async fn select_recv(rxs: &mut [Self::Rx], open: &mut Vec<usize>) -> usize {
        let mut rxs = each_mut(rxs);
        let (k, r) = select4(open, |i| rxs[i].take().map(TokioRx::recv)).await;
        outcome(open, k, r.is_some())
    }

    async fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let (k, ok) = select4(open, |i| Some(txs[i].send(m))).await;
        outcome(open, k, ok)
    }
}

/// The outcome of a select whose branch `k` of `open` completed, `ok` if
/// it moved a message: 1, or 0 after removing its channel from `open`.
fn outcome(open: &mut Vec<usize>, k: usize, ok: bool) -> usize {
    if ok {
        1
    } else {
        close_at(open, k);
        0
    }
}

// ------------------------------------------------------- async-channel ----

/// async-channel 2 (`bounded(cap)`, `unbounded()`); no rendezvous flavour
/// (capacity 0 panics).
pub struct AsyncChannel;

impl AsyncChan for AsyncChannel {
    const NAME: &'static str = "async-channel";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = async_channel::Sender<Msg>;
    type Rx = async_channel::Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        match cap {
            Some(0) => None,
            Some(cap) => Some(async_channel::bounded(cap)),
            None => Some(async_channel::unbounded()),
        }
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    async fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).await.is_ok()
    }

    async fn recv(rx: &mut Self::Rx) -> Option<Msg> {
        rx.recv().await.ok()
    }

    async fn select_recv(rxs: &mut [Self::Rx], open: &mut Vec<usize>) -> usize {
        let (k, r) = select4(open, |i| Some(rxs[i].recv())).await;
        outcome(open, k, r.is_ok())
    }

    async fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let (k, r) = select4(open, |i| Some(txs[i].send(m))).await;
        outcome(open, k, r.is_ok())
    }
}

// --------------------------------------------------------- flume async ----

/// flume's async side (`send_async`, `recv_async`).
pub struct FlumeAsync;

impl AsyncChan for FlumeAsync {
    const NAME: &'static str = "flume";
    const MPMC: bool = true;
    const SELECT: bool = true;
    /// A `send_async` future dropped by `tokio::select!` after a receiver
    /// took its message has still sent it.
    const EXACT_SELECT: bool = false;
    type Tx = flume::Sender<Msg>;
    type Rx = flume::Receiver<Msg>;

    /// No rendezvous flavour: flume 0.11's async side hands a waiting async
    /// receiver's message to the queue and returns at once, and here
    /// `tasks_bounded0_mpmc` hung on it (a known flume bug: the async
    /// rendezvous deadlock of its issue 140, unfixed in 0.11.1).
    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        match cap {
            Some(0) => None,
            cap => Flume::new(cap),
        }
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    async fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send_async(m).await.is_ok()
    }

    async fn recv(rx: &mut Self::Rx) -> Option<Msg> {
        rx.recv_async().await.ok()
    }

    async fn select_recv(rxs: &mut [Self::Rx], open: &mut Vec<usize>) -> usize {
        let (k, r) = select4(open, |i| Some(rxs[i].recv_async())).await;
        outcome(open, k, r.is_ok())
    }

    async fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let (k, r) = select4(open, |i| Some(txs[i].send_async(m))).await;
        outcome(open, k, r.is_ok())
    }
}

// --------------------------------------------------------- kanal async ----

/// kanal's async side (`bounded_async`, `unbounded_async`); no select (see
/// the module docs).
pub struct KanalAsync;

impl AsyncChan for KanalAsync {
    const NAME: &'static str = "kanal";
    const MPMC: bool = true;
    const SELECT: bool = false;
    type Tx = kanal::AsyncSender<Msg>;
    type Rx = kanal::AsyncReceiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(match cap {
            Some(cap) => kanal::bounded_async(cap),
            None => kanal::unbounded_async(),
        })
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    async fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).await.is_ok()
    }

    async fn recv(rx: &mut Self::Rx) -> Option<Msg> {
        rx.recv().await.ok()
    }

    async fn select_recv(_: &mut [Self::Rx], _: &mut Vec<usize>) -> usize {
        no_select(Self::NAME)
    }

    async fn select_send(_: &[Self::Tx], _: &mut Vec<usize>, _: Msg) -> usize {
        no_select(Self::NAME)
    }
}
